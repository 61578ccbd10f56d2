package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.nats.client.Connection;
import io.nats.client.Options;
import java.io.IOException;
import java.security.MessageDigest;
import java.time.Duration;
import java.time.Instant;
import java.util.Base64;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;

/**
 * The agent side of toolbus (docs/protocol.md 3, 4, 6, 5.9): call a batch, list tools in any
 * format, watch events and progress, answer, confirm and cancel parked calls, fetch stored
 * outputs. Safe for concurrent use. Close it to close a connection it opened itself, and the
 * thread that reads its batches' running notices (3.2.1).
 */
public final class ToolbusClient implements AutoCloseable {
  private final Connection nc;
  private final boolean owned;
  private final Subjects subj;
  private final String source;
  private final Duration timeout;
  private final Resend resend;
  private final Requester rq;
  private final Sender tx;
  private final Offloader off;
  private final Map<String, Long> revs = new ConcurrentHashMap<>();

  private ToolbusClient(Builder b) {
    this.nc = b.nc;
    this.owned = b.owned;
    this.subj = new Subjects(b.prefix);
    this.source = b.source;
    this.timeout = b.timeout;
    this.resend = b.resend;
    this.rq = new Requester(nc);
    this.tx = new Sender(this, nc, rq, b.source, revs);
    this.off = new Offloader(nc, subj.outputsBucket(), b.inlineLimit, b.maxOutput);
  }

  /** A builder on an open connection (not closed by {@link #close}). */
  public static Builder builder(Connection nc) {
    Builder b = new Builder();
    b.nc = nc;
    return b;
  }

  /** A builder that connects to url; {@link #close} closes that connection. */
  public static Builder connect(String url) throws IOException, InterruptedException {
    Builder b = new Builder();
    b.nc = Urls.connect(new Options.Builder().connectionName("toolbus-java-client"), url);
    b.owned = true;
    return b;
  }

  /** Configures a client. */
  public static final class Builder {
    private Connection nc;
    private boolean owned;
    private String prefix = "toolbus";
    private String source = "toolbus/java-client";
    private Duration timeout = Duration.ofMinutes(10);
    private Resend resend = Resend.defaults();
    private int inlineLimit;
    private long maxOutput;

    public Builder prefix(String p) { prefix = p; return this; }
    /** The CloudEvents source of the events this client sends. */
    public Builder source(String s) { source = s; return this; }
    /** How long a batch may wait for its reply (10 minutes unless set). */
    public Builder timeout(Duration t) { timeout = t; return this; }
    /** Re-sending a batch after silence (3.2.1): {@link Resend#defaults()} unless set; {@link Resend#off()}. */
    public Builder resend(Resend r) { resend = java.util.Objects.requireNonNull(r, "resend"); return this; }
    public Builder inlineLimit(int n) { inlineLimit = n; return this; }
    public Builder maxOutput(long n) { maxOutput = n; return this; }
    public ToolbusClient build() { return new ToolbusClient(this); }
  }

  /** Runs a batch with a fresh reply id and waits for its reply. */
  public Reply call(String session, Batch b) {
    return call(session, Ids.next(), b, null);
  }

  /** Runs a batch as reply replyId, with an optional deadline, and waits for its reply. */
  public Reply call(String session, String replyId, Batch b, Instant expiry) {
    Event e = tx.batchEvent(session, replyId, b, expiry);
    Event re = rq.request(subj.call(session), e, Codes.CALL_REPLY, timeout, resend);
    Reply r = re.dataAs(Reply.class, Codes.BAD_EVENT);
    // 3.2: each call of the batch once, finished or parked; a forged reply may name others, or one twice
    if (!b.calls().stream().map(Call::id).sorted().toList().equals(java.util.stream.Stream.concat(
        r.results().stream().map(Result::id), r.parked().stream().map(Parked::id)).sorted().toList())) {
      throw new BusException(Codes.BAD_EVENT, "reply: its results and parked calls do not name each call of the batch once");
    }
    if (r.sessionrev() != null && r.sessionrev() > 0) {
      revs.put(session, r.sessionrev());
    }
    return r;
  }

  /** Publishes a batch without waiting; follow it with {@link #watch}. Returns the reply id. */
  public String publish(String session, String replyId, Batch b) {
    Event e = tx.batchEvent(session, replyId == null ? Ids.next() : replyId, b, null);
    nc.publish(e.toMessage(subj.call(session), null));
    return e.id;
  }

  /**
   * Lists the tools the session sees, in format (toolbus, openai, openai-responses, anthropic,
   * gemini, mcp; null is toolbus), with the request-scoped tools of request (may be null); user
   * (may be null) selects the skills visible to that user.
   */
  public ToolsList tools(String session, String format, Request request, Object user) {
    return tools(session, format, request, user, false);
  }

  /**
   * {@link #tools(String, String, Request, Object)}; with deferred (formats openai-responses and
   * anthropic), the tools of the inactive meta groups are added for the provider's own tool
   * search and {@link ToolsList#deferred()} names their groups (docs/protocol.md 4.1).
   */
  public ToolsList tools(String session, String format, Request request, Object user, boolean deferred) {
    ObjectNode q = Json.MAPPER.createObjectNode();
    if (format != null) {
      q.put("format", format);
    }
    if (deferred) {
      q.put("deferred", true);
    }
    if (request != null) {
      q.set("request", Json.tree(request));
    }
    if (user != null) {
      q.set("user", Json.tree(user));
    }
    Event re = rq.request(subj.tools(session), tx.event(Codes.TOOLS_QUERY, session, q), Codes.TOOLS_LIST, Duration.ofSeconds(10));
    ToolsList l = re.dataAs(ToolsList.class, Codes.BAD_EVENT);
    if (l.sessionrev() != null && l.sessionrev() > 0) {
      revs.put(session, l.sessionrev());
    }
    return l;
  }

  /**
   * Cancels the named calls of a reply (every call when none is named). More than
   * {@link Codes#MAX_CANCEL_CALLS} ids is bad_event, nothing sent: routers refuse such a cancel and
   * workers drop it (3.5, 1.30).
   */
  public void cancel(String session, String replyId, String... calls) {
    if (calls.length > Codes.MAX_CANCEL_CALLS) {
      throw new BusException(Codes.BAD_EVENT, "a cancel names " + calls.length + " calls; at most "
          + Codes.MAX_CANCEL_CALLS + " are allowed");
    }
    Event e = tx.event(Codes.CALL_CANCEL, session, calls.length == 0 ? null : Map.of("calls", List.of(calls)));
    e.replyid = Ids.requireId("reply id", replyId);
    nc.publish(e.toMessage(subj.cancel(session), null));
    try {
      nc.flush(Duration.ofSeconds(10));
    } catch (Exception ex) {
      throw new BusException(Codes.INTERNAL, "cancel: " + ex.getMessage(), ex);
    }
  }

  /** Answers a parked external call of tool; a large output is stored first (5.9). */
  public void answer(String session, String replyId, String callId, String tool, Answer a) {
    Ids.requireId("session id", session);
    Ids.requireId("reply id", replyId);
    Ids.requireId("call id", callId);
    if (a.output() != null && !a.output().isEmpty()) {
      try {
        a = a.withOutput(off.fit(Ids.callKey(session, replyId, callId), a.output(), 0, Codes.STATE_ERROR.equals(a.state())));
      } catch (IOException e) {
        throw new BusException(Codes.BAD_REQUEST, "answer of " + callId + ": " + e.getMessage(), e);
      }
    }
    tx.sendAnswer(subj.answer(Ids.requireName("tool", tool)), session, replyId, callId, a);
  }

  /** Confirms (or denies) a call parked for confirmation, on P.approve.<tool> (6.3). */
  public void confirm(String session, String replyId, String callId, String tool, Answer a) {
    tx.sendAnswer(subj.approve(Ids.requireName("tool", tool)), session, replyId, callId, a);
  }

  /** Allows or denies a parked call, with the input_digest read from parked.list. */
  public void confirm(String session, String replyId, String callId, String tool, boolean allow, String reason) {
    String digest = tx.parkedDigest(session, replyId, callId);
    confirm(session, replyId, callId, tool, allow ? Answer.confirm(digest, null) : Answer.deny(digest, reason));
  }

  /** Sends an admin verb (section 9) and returns its reply data. */
  public JsonNode admin(String verb, String session, Object data) {
    if (session != null) {
      revs.remove(session);
    }
    Event re = rq.request(subj.admin(verb), tx.event(Codes.ADMIN, session, data == null ? Map.of() : data), Codes.ADMIN_REPLY, Duration.ofSeconds(10));
    return re.dataTree();
  }

  /**
   * Sends a task verb on P.tasks.<session> (docs/protocol.md 5.10): op get, list, wait, cancel or
   * output; ids as the verb takes them; timeoutMs bounds a wait (0: the router's 60 s); any ends a
   * wait at the first task that ends. A task of another session is refused (unknown_task).
   */
  public Task.Reply taskQuery(String session, String op, List<String> ids, long timeoutMs, boolean any) {
    ObjectNode q = Json.MAPPER.createObjectNode();
    q.put("op", op);
    if (ids != null && !ids.isEmpty()) {
      q.set("ids", Json.tree(ids));
    }
    if (timeoutMs > 0) {
      q.put("timeout_ms", timeoutMs);
    }
    if (any) {
      q.put("any", true);
    }
    Duration wait = Duration.ofMillis(timeoutMs > 0 ? timeoutMs : 60_000).plusSeconds(10);
    Event re = rq.request(subj.tasks(Ids.requireId("session id", session)), tx.event(Codes.TASK_QUERY, session, q),
        Codes.TASK_REPLY, wait);
    return re.dataAs(Task.Reply.class, Codes.BAD_EVENT);
  }

  /** One task of the session. */
  public Task task(String session, String id) {
    return first(taskQuery(session, "get", List.of(id), 0, false), id);
  }

  /** The session's tasks, newest first. */
  public List<Task> tasks(String session) {
    return taskQuery(session, "list", null, 0, false).tasks();
  }

  /**
   * Waits until every task named ended, or timeout (at most 120 s), and returns them as they are
   * then: AgentScope's wait_async_results.
   */
  public List<Task> waitTasks(String session, Duration timeout, String... ids) {
    return taskQuery(session, "wait", List.of(ids), Math.max(timeout.toMillis(), 1), false).tasks();
  }

  /** Cancels a running task: it ends interrupted and its run stops; an ended task keeps its end. */
  public Task cancelTask(String session, String id) {
    return first(taskQuery(session, "cancel", List.of(id), 0, false), id);
  }

  /** A task with its output so far (the worker's progress, its last 32 KiB). */
  public Task.Reply taskOutput(String session, String id) {
    Task.Reply r = taskQuery(session, "output", List.of(id), 0, false);
    first(r, id);
    return r;
  }

  private static Task first(Task.Reply r, String id) {
    if (r.tasks().isEmpty()) {
      throw new BusException(Codes.BAD_EVENT, "task " + Ids.quote(id) + ": the reply names no task");
    }
    return r.tasks().get(0);
  }

  /** Watches a session's events into a queue (read with {@link EventWatch#next}). */
  public EventWatch watch(String session) {
    return new EventWatch(nc, subj.events(Ids.requireId("session id", session)), null);
  }

  /** Watches a session's events, each given to listener on the subscription's thread. */
  public EventWatch watch(String session, Consumer<Event> listener) {
    return new EventWatch(nc, subj.events(Ids.requireId("session id", session)), listener);
  }

  /** A stored output's bytes, checked against its digest. */
  public record Output(String mediaType, long size, String digest, byte[] bytes) {}

  /**
   * Reads a stored output (a nats-object:// url with #sha256=) through a router, window by window;
   * an object said to be past the output ceiling ({@code maxOutput}, 64 MiB by default) is refused.
   */
  public Output fetch(String session, String url) {
    int hash = url == null ? -1 : url.indexOf("#sha256=");
    if (url == null || !url.startsWith("nats-object://") || hash < 0) {
      throw new BusException(Codes.BAD_REQUEST, "fetch: " + Ids.quote(url) + " is not a nats-object:// url with #sha256=<digest>: give the url exactly as the result has it");
    }
    String want = url.substring(hash + 8);
    MessageDigest h = Offloader.sha256();
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    long offset = 0;
    String media = null;
    long size = -1;
    do {
      Event e = tx.event(Codes.OUTPUT_GET, session, Map.of("url", url, "offset", offset));
      JsonNode ch = rq.request(subj.outputs(session), e, Codes.OUTPUT_CHUNK, Duration.ofSeconds(30)).dataTree();
      if (size >= 0 && ch.path("size").asLong() != size || !want.equals(ch.path("digest").asText()) || ch.path("offset").asLong() != offset) {
        throw new BusException(Codes.INTERNAL, "fetch " + url + ": the router served another object or window");
      }
      size = ch.path("size").asLong();
      media = ch.path("media_type").asText();
      if (size > off.max()) {
        throw new BusException(Codes.BAD_EVENT, "fetch " + url + ": the router says " + size + " bytes, past the output ceiling of " + off.max() + " (5.9)");
      }
      byte[] part = Base64.getDecoder().decode(ch.path("data").asText(""));
      if (part.length == 0 && offset < size || offset + part.length > size) {
        throw new BusException(Codes.INTERNAL, "fetch " + url + ": an empty window, or bytes past the size, at " + offset + " of " + size);
      }
      h.update(part);
      out.write(part, 0, part.length);
      offset += part.length;
    } while (offset < size);
    String got = HexFormat.of().formatHex(h.digest());
    if (!got.equals(want)) {
      throw new BusException(Codes.INTERNAL, "fetch " + url + ": the bytes hash to sha256 " + got + ", not " + want);
    }
    return new Output(media, size, want, out.toByteArray());
  }

  @Override
  public void close() throws InterruptedException {
    rq.close();
    if (owned) {
      nc.close();
    }
  }
}
