package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Message;
import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/** Checks one exec request, runs the call and makes its result (docs/protocol.md 5.1, 5.2). */
final class Executor {
  private final Worker w;
  private final CallTable calls;
  private final ScheduledExecutorService timers;

  Executor(Worker w, CallTable calls, ScheduledExecutorService timers) {
    this.w = w;
    this.calls = calls;
    this.timers = timers;
  }

  /** The request's event and data, or the bad_event that refuses it. */
  record Checked(Event e, JsonNode data, BusException err) {}

  static Checked check(Worker.Tool t, Message m) {
    try {
      Event e = Event.decode(m);
      if (!Codes.EXEC.equals(e.type)) {
        throw new BusException(Codes.BAD_EVENT, "expected " + Codes.EXEC + " on " + m.getSubject() + ", got " + e.type);
      }
      JsonNode d = e.dataTree();
      if (!d.isObject() || !d.path("call").isObject()) {
        throw new BusException(Codes.BAD_EVENT, Codes.EXEC + ": data: the call is missing");
      }
      String id = d.path("call").path("id").asText(null);
      if (!Ids.validId(e.sessionid) || !Ids.validId(e.replyid) || !Ids.validId(id)) {
        throw new BusException(Codes.BAD_EVENT, "an exec request needs valid sessionid, replyid and call id");
      }
      String name = d.path("call").path("name").asText("");
      if (!name.equals(t.def().name())) {
        throw new BusException(Codes.BAD_EVENT, "call names tool " + Ids.quote(name) + " on the subject of " + Ids.quote(t.def().name()));
      }
      JsonNode in = d.path("call").path("input");
      if (!in.isMissingNode() && !in.isNull() && !in.isObject()) { // 5.1: the object that passed the schema
        throw new BusException(Codes.BAD_EVENT, Codes.EXEC + ": data: call.input must be an object");
      }
      return new Checked(e, d, null);
    } catch (BusException be) {
      return new Checked(null, null, be);
    }
  }

  void serve(Worker.Tool t, Checked ch, Replier rp) {
    if (ch.err() != null) {
      rp.refuse(ch.err());
      return;
    }
    if (w.intake().isCutOff()) {
      rp.drop();
      return;
    }
    Event e = ch.e();
    JsonNode d = ch.data();
    Instant deadline = e.expiry();
    ToolCall c = new ToolCall(d.path("call").path("id").asText(), t.def().name(), e.sessionid, e.replyid,
        d.path("call").path("input").isObject() ? d.path("call").get("input") : Json.emptyObject(),
        absent(d.get("user")), absent(d.get("context")), d.path("attempt").asInt(1),
        absent(d.get("state")), deadline, w, progressInbox(d, rp));
    c.bind(Thread.currentThread());
    ScheduledFuture<?> timer = deadline == null ? null : timers.schedule(() -> c.stop(ToolCall.Stop.DEADLINE),
        Math.max(0, deadline.toEpochMilli() - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
    CallTable.Seen first = calls.begin(c);
    if (first != null) {
      c.cancel(first.id()); // the cancel overtook the request: never start it
    }
    ExecResult res = null;
    try {
      if (c.stopped() != ToolCall.Stop.CANCELLED) {
        res = run(t, c);
      }
    } finally {
      calls.end(c);
      if (timer != null) {
        timer.cancel(false);
      }
      c.bind(null);
      Thread.interrupted(); // clear a cancel's interrupt before answering
    }
    if (c.stopped() == ToolCall.Stop.DRAINED) {
      rp.drop();
      return;
    }
    if (c.stopped() == ToolCall.Stop.CANCELLED) {
      // The cancel's id tells the router to hold the batch's next run until it has handled the
      // cancel too (protocol 3.5, 1.30).
      res = ExecResult.interrupted(c.cancelBy());
    }
    res = fit(t, c, res);
    Event out = Event.of(Codes.EXEC_RESULT, w.source(), res);
    out.sessionid = e.sessionid;
    out.replyid = e.replyid;
    out.toolcallid = c.id();
    out.traceparent = e.traceparent;
    out.tracestate = e.tracestate;
    rp.result(out);
  }

  /**
   * Where the router that sent the call takes its progress (5.3, 1.18): the reply subject when the
   * exec says progress_reply, a durable call's progress_inbox; null for a router of 1.17.
   */
  private static String progressInbox(JsonNode d, Replier rp) {
    if (rp.replyTo() != null) {
      return d.path("progress_reply").booleanValue() ? rp.replyTo() : null;
    }
    JsonNode inbox = d.path("progress_inbox");
    return inbox.isTextual() && !inbox.asText().isEmpty() ? inbox.asText() : null;
  }

  private static JsonNode absent(JsonNode n) {
    return n == null || n.isNull() ? null : n;
  }

  /** Calls the handler, turning exceptions into error results. */
  private ExecResult run(Worker.Tool t, ToolCall c) {
    ExecResult res;
    try {
      res = toResult(t.handler().handle(c));
    } catch (InvocationTargetException ite) {
      Throwable x = ite.getCause() == null ? ite : ite.getCause();
      res = ExecResult.error("Error: " + message(x));
    } catch (Exception | StackOverflowError | OutOfMemoryError x) {
      res = ExecResult.error("Error: " + message(x));
    }
    if (res.state() == null || res.output() == null || res.cancel() != null) { // only the worker names a cancel
      res = new ExecResult(res.state() == null ? Codes.STATE_SUCCESS : res.state(),
          res.output() == null ? List.of() : res.output(), res.metadata(), res.statePatch());
    }
    JsonNode patch = c.patch();
    if (patch != null) {
      if (!t.def().isStateInjected()) {
        return ExecResult.error("Error: tool " + t.def().name() + " set a state patch but is not state_injected");
      }
      res = res.withStatePatch(patch);
    }
    return res;
  }

  static String message(Throwable x) {
    String m = x.getMessage();
    return m == null || m.isEmpty() ? x.getClass().getSimpleName() : m;
  }

  /** The handler's return value as a result (see {@link Handler}). */
  static ExecResult toResult(Object out) {
    if (out == null) {
      return ExecResult.success(List.of());
    }
    if (out instanceof ExecResult r) {
      return r;
    }
    if (out instanceof String s) {
      return ExecResult.success(List.of(Block.text(s)));
    }
    if (out instanceof Block b) {
      return ExecResult.success(List.of(b));
    }
    if (out instanceof List<?> l && l.stream().allMatch(x -> x instanceof Block)) {
      List<Block> bs = new ArrayList<>();
      l.forEach(x -> bs.add((Block) x));
      return ExecResult.success(bs);
    }
    return ExecResult.success(List.of(Block.text(Json.text(out))));
  }

  /** Fits the output under the inline limit (5.9); past the ceiling the call is an error. */
  private ExecResult fit(Worker.Tool t, ToolCall c, ExecResult res) {
    int extra = (res.metadata() == null ? 0 : Json.bytes(res.metadata()).length)
        + (res.statePatch() == null ? 0 : Json.bytes(res.statePatch()).length);
    if (extra > w.connection().getServerInfo().getMaxPayload() - Offloader.RESERVE) {
      return ExecResult.error("Error: the result of tool '" + t.def().name() + "' has " + extra
          + " bytes of metadata and state patch, more than the NATS payload limit of "
          + w.connection().getServerInfo().getMaxPayload() + " bytes allows; the state patch was not applied.");
    }
    try {
      return res.withOutput(w.offloader().fit(c.key(), res.output(), extra, !Codes.STATE_SUCCESS.equals(res.state())));
    } catch (Offloader.TooLarge tl) {
      return ExecResult.error("Error: the output of tool '" + t.def().name() + "' is " + tl.size
          + " bytes, more than this worker's limit of " + tl.max + " bytes; it was neither sent nor stored.");
    } catch (IOException io) {
      return ExecResult.error("Error: the output of tool '" + t.def().name() + "' is too large to send inline and could not be stored: " + io.getMessage());
    }
  }
}
