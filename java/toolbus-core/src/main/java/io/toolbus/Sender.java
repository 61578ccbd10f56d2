package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;

/** Builds and sends the client's events: batches, answers and the parked-call lookups. */
final class Sender {
  private final ToolbusClient client;
  private final Requester rq;
  private final String source;
  private final Map<String, Long> revs;

  Sender(ToolbusClient client, Connection nc, Requester rq, String source, Map<String, Long> revs) {
    this.client = client;
    this.rq = rq;
    this.source = source;
    this.revs = revs;
  }

  Event event(String type, String session, Object data) {
    if (session != null) {
      Ids.requireId("session id", session);
    }
    Event e = Event.of(type, source, data);
    e.sessionid = session;
    return e;
  }

  Event batchEvent(String session, String replyId, Batch b, Instant expiry) {
    if (b == null || b.calls() == null) {
      throw new BusException(Codes.BAD_REQUEST, "a batch needs calls");
    }
    Long rev = session == null ? null : revs.get(session);
    Event e = event(Codes.CALL_BATCH, session, b.sessionrev() == null && rev != null ? b.withSessionRev(rev) : b);
    if (replyId != null) {
      e.id = Ids.requireId("reply id", replyId);
    }
    if (expiry != null) {
      e.expirytime = expiry.toString();
    }
    return e;
  }

  /**
   * Pages one lookup reads at most: each page lists a call at least, so a session within the
   * default cap of 1000 parked calls is read whole.
   */
  static final int MAX_PAGES = 1000;

  /** The input_digest of a parked call, as the router's parked.list gives it. */
  String parkedDigest(String session, String replyId, String callId) {
    return parkedDigest(session, replyId, callId, 0);
  }

  /**
   * The same, reading pages of at most limit calls (0: as many as fit) after each page's next
   * (1.18; a router of 1.17 sends one page without next). A page with a next that lists no call
   * or repeats the cursor it was asked for, or a walk past MAX_PAGES, ends the lookup with an
   * error: a hostile router cannot keep it going.
   */
  String parkedDigest(String session, String replyId, String callId, int limit) {
    Map<String, Object> q = new HashMap<>();
    if (limit > 0) {
      q.put("limit", limit);
    }
    for (int page = 0; page < MAX_PAGES; page++) {
      JsonNode list = client.admin("parked.list", session, q);
      for (JsonNode p : list.path("parked")) {
        if (replyId.equals(p.path("reply_id").asText()) && callId.equals(p.path("id").asText())) {
          return p.path("input_digest").asText(null);
        }
      }
      String next = list.path("next").asText("");
      if (next.isEmpty()) {
        throw new BusException(Codes.NOT_PARKED, "call " + callId + " of reply " + replyId + " is not parked in session " + session);
      }
      if (list.path("parked").isEmpty() || next.equals(q.get("after"))) {
        throw new BusException(Codes.INTERNAL, "parked.list of session " + session + " did not advance past " + next);
      }
      q.put("after", next);
    }
    throw new BusException(Codes.LIMIT_EXCEEDED, "parked.list of session " + session + " has more than " + MAX_PAGES
        + " pages; call " + callId + " of reply " + replyId + " is not on them");
  }

  void sendAnswer(String subject, String session, String replyId, String callId, Answer a) {
    revs.remove(session);
    Event e = event(Codes.ANSWER, session, a);
    e.replyid = Ids.requireId("reply id", replyId);
    e.toolcallid = Ids.requireId("call id", callId);
    Event re = rq.request(subject, e, Codes.ANSWER_ACK, Duration.ofSeconds(10));
    if (!re.dataTree().path("accepted").asBoolean(false)) {
      throw new BusException(Codes.INTERNAL, "answer not accepted");
    }
  }
}
