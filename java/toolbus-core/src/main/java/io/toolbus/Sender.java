package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import java.time.Duration;
import java.time.Instant;
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

  /** The input_digest of a parked call, as the router's parked.list gives it. */
  String parkedDigest(String session, String replyId, String callId) {
    JsonNode list = client.admin("parked.list", session, Map.of());
    for (JsonNode p : list.path("parked")) {
      if (replyId.equals(p.path("reply_id").asText()) && callId.equals(p.path("id").asText())) {
        return p.path("input_digest").asText(null);
      }
    }
    throw new BusException(Codes.NOT_PARKED, "call " + callId + " of reply " + replyId + " is not parked in session " + session);
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
