package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.time.Instant;
import java.util.Arrays;
import java.util.List;

/**
 * What a tool receives besides its input (docs/protocol.md 5.1): the call's identifiers, the
 * batch's runtime context (never shown to the model), the session's agent state for
 * state_injected tools, a progress emitter, a state patch, and cancellation.
 */
public final class ToolCall {
  /** Why a call stopped early. */
  enum Stop { CANCELLED, DRAINED, DEADLINE }

  private final String id;
  private final String name;
  private final String sessionId;
  private final String replyId;
  private final JsonNode input;
  private final JsonNode user;
  private final JsonNode context;
  private final int attempt;
  private final JsonNode state;
  private final Instant deadline;
  private final Worker worker;
  private final String progressTo; // where progress goes: its router's inbox (1.18), or null for the session's events

  private volatile Stop stop;
  private volatile String cancelBy; // the cancel event's id, when one stopped the call (3.5, 1.30)
  private volatile Thread runner;
  private int seq;
  private JsonNode patch;

  ToolCall(String id, String name, String sessionId, String replyId, JsonNode input, JsonNode user,
      JsonNode context, int attempt, JsonNode state, Instant deadline, Worker worker, String progressInbox) {
    this.id = id;
    this.name = name;
    this.sessionId = sessionId;
    this.replyId = replyId;
    this.input = input;
    this.user = user;
    this.context = context;
    this.attempt = attempt;
    this.state = state;
    this.deadline = deadline;
    this.worker = worker;
    this.progressTo = progressInbox == null ? null : progressInbox + ".progress";
  }

  public String id() { return id; }
  public String name() { return name; }
  public String sessionId() { return sessionId; }
  public String replyId() { return replyId; }
  /** The input object, already validated against the schema by the router. */
  public JsonNode input() { return input; }
  /** The batch's user; null when it had none. */
  public JsonNode user() { return user; }
  /** The batch's runtime context; null when it had none. */
  public JsonNode context() { return context; }
  /** Counts from 1; grows when the router retries. */
  public int attempt() { return attempt; }
  /** The session's agent state (state_injected tools only); null otherwise. */
  public JsonNode state() { return state; }
  /** The call's deadline (its expirytime), or null. */
  public Instant deadline() { return deadline; }
  /** The call key {@code <session>.<replyid>.<callid>}. */
  public String key() { return Ids.callKey(sessionId, replyId, id); }

  /** The user when it is a JSON string, else its JSON text; null when absent. */
  public String userString() {
    return user == null ? null : user.isTextual() ? user.asText() : Json.text(user);
  }

  /** Decodes the runtime context's member key into type; null when absent. */
  public <T> T contextValue(String key, Class<T> type) {
    if (context == null || !context.isObject() || !context.has(key)) {
      return null;
    }
    return Json.decode(context.get(key), type, Codes.BAD_REQUEST, "context." + key);
  }

  /** Reports whether the agent cancelled the call (or the worker's drain or deadline ended it). */
  public boolean cancelled() {
    return stop != null;
  }

  /** Throws InterruptedException when the call was cancelled: a check for long loops. */
  public void checkCancelled() throws InterruptedException {
    if (stop != null || Thread.currentThread().isInterrupted()) {
      throw new InterruptedException("the call " + id + " was cancelled");
    }
  }

  Stop stopped() {
    return stop;
  }

  void bind(Thread t) {
    runner = t;
  }

  /** The id of the cancel event that stopped the call, for its result to name (3.5, 1.30); null: none. */
  String cancelBy() {
    return cancelBy;
  }

  void stop(Stop why) {
    stop(why, null);
  }

  /** Stops the call for cancel event id (null: a cancel whose id no result may name). */
  void cancel(String id) {
    stop(Stop.CANCELLED, id);
  }

  private void stop(Stop why, String id) {
    synchronized (this) {
      if (stop != null) {
        return;
      }
      cancelBy = id; // first: whoever reads stop as CANCELLED reads the id too
      stop = why;
    }
    Thread t = runner;
    if (t != null) {
      t.interrupt();
    }
  }

  /**
   * Sends an io.toolbus.call.progress event with blocks (5.3): to the router that sent the call
   * when the exec says it takes progress ({@code progress_reply}, a durable call's {@code
   * progress_inbox}: 1.18), which publishes it on the session's events; else (a router of 1.17) on
   * the session's events subject itself. It never becomes part of the result. Large blocks are stored as for results.
   */
  public void progress(Block... blocks) throws IOException {
    progress(Arrays.asList(blocks));
  }

  /** Progress with a list of blocks. */
  public void progress(List<Block> blocks) throws IOException {
    if (worker == null) {
      return;
    }
    // Blocks past 60 KiB stored (the rest of MAX_PROGRESS is the event's attributes), as in Go.
    long payload = worker.connection().getServerInfo().getMaxPayload();
    int rest = (int) (payload - Offloader.RESERVE - (Codes.MAX_PROGRESS - (4 << 10)));
    List<Block> out = worker.offloader().fit(key(), blocks, rest, false);
    int n;
    synchronized (this) {
      n = ++seq;
    }
    Event e = Event.of(Codes.CALL_PROGRESS, worker.source(), java.util.Map.of("seq", n, "output", out));
    e.subject = id;
    e.sessionid = sessionId;
    e.replyid = replyId;
    e.toolcallid = id;
    worker.connection().publish(e.toMessage(progressTo != null ? progressTo : worker.subjects().events(sessionId), null));
  }

  /** Sets the JSON merge patch (RFC 7386) applied to the session's agent state on success. */
  public synchronized void patchState(Object p) {
    patch = Json.tree(p);
  }

  synchronized JsonNode patch() {
    return patch;
  }
}
