package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.nats.client.Connection;
import io.nats.client.Message;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * Registers a worker (docs/protocol.md 7.1): every heartbeat, one request per group on {@code
 * P.register.group.<group>} and one per tool on {@code P.register.<tool>} with that tool's
 * definition, the calls of it the worker holds ({@code inflight}), {@code binary_exec} and, unless
 * turned off, {@code compact_exec} (protocol 1.16); and the
 * leave of a drain, one per tool. NATS permissions confine which of these subjects a login may
 * publish (protocol 1.12). The requests of a beat are sent at once and awaited together.
 */
final class Registrar {
  private static final System.Logger LOG = System.getLogger("io.toolbus.Worker");

  private final Connection nc;
  private final Subjects subj;
  private final String id;
  private final String source;
  private final List<Group> groups;
  private final Duration heartbeat;
  private final Supplier<List<ToolDef>> tools;
  private final CallTable calls;
  private final boolean compactExec;
  private volatile boolean acknowledged; // every request of a registration was answered once

  Registrar(Connection nc, Subjects subj, String id, String source, List<Group> groups, Duration heartbeat,
      Supplier<List<ToolDef>> tools, CallTable calls, boolean compactExec) {
    this.nc = nc;
    this.subj = subj;
    this.id = id;
    this.source = source;
    this.groups = groups;
    this.heartbeat = heartbeat;
    this.tools = tools;
    this.calls = calls;
    this.compactExec = compactExec;
  }

  /** One beat; a registration no router answers is logged and sent again at the next. */
  void beat() {
    try {
      register();
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.WARNING, "worker: registration not acknowledged: " + e.getMessage());
    }
  }

  /** Sends the registration and returns the tools' acks merged ({"accepted", "rejected"}). */
  JsonNode register() {
    Map<String, List<String>> inflight = calls.byTool();
    Map<String, ObjectNode> parts = new LinkedHashMap<>();
    for (Group g : groups) {
      ObjectNode reg = Json.MAPPER.createObjectNode().put("worker", id);
      reg.set("groups", Json.tree(List.of(g)));
      parts.put(subj.registerGroup(g.name()), reg);
    }
    for (ToolDef d : tools.get()) {
      ObjectNode reg = Json.MAPPER.createObjectNode().put("worker", id);
      reg.set("tools", Json.tree(List.of(d)));
      reg.set("inflight", Json.tree(Map.of(d.name(), inflight.getOrDefault(d.name(), List.of()))));
      reg.put("binary_exec", true);
      if (compactExec) {
        reg.put("compact_exec", true);
      }
      parts.put(subj.register(d.name()), reg);
    }
    ObjectNode ack = sendAll(parts, heartbeat);
    for (JsonNode r : ack.path("rejected")) {
      LOG.log(System.Logger.Level.ERROR, "worker: tool " + r.path("name").asText() + " rejected: " + r.path("reason").asText());
    }
    return ack;
  }

  /** Tells the routers the worker leaves, one leave per tool (within a second; a failure is only logged). */
  void leave() {
    Map<String, ObjectNode> parts = new LinkedHashMap<>();
    for (ToolDef d : tools.get()) {
      parts.put(subj.register(d.name()), Json.MAPPER.createObjectNode().put("worker", id).put("leaving", true));
    }
    try {
      sendAll(parts, Duration.ofSeconds(1));
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.DEBUG, "worker: leaving not acknowledged: " + e.getMessage());
    }
  }

  /** Waits for f until deadline and hands back f, whatever its outcome (read later by await). */
  private static CompletableFuture<Message> awaitQuietly(CompletableFuture<Message> f, long deadline) {
    try {
      f.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
    } catch (Exception e) {
      // await reports it
    }
    return f;
  }

  /**
   * Sends every request at once (one after another until a registration was acknowledged), waits
   * for them together until timeout, and merges the tools' acks; a group's rejection is logged
   * here. Throws the first failure when nothing was acknowledged; a partial failure is logged and
   * the next beat tries again.
   */
  private ObjectNode sendAll(Map<String, ObjectNode> parts, Duration timeout) {
    long deadline = System.nanoTime() + timeout.toNanos();
    Requester rq = new Requester(nc);
    Map<String, CompletableFuture<Message>> sent = new LinkedHashMap<>();
    boolean inOrder = !acknowledged;
    for (Map.Entry<String, ObjectNode> p : parts.entrySet()) {
      CompletableFuture<Message> f = rq.start(p.getKey(), Event.of(Codes.REGISTER, source, p.getValue()), deadline);
      if (inOrder) {
        // The first registration goes one request after another: routers list tools and groups
        // in the order of their first registration (7.4), and requests sent at once land in any
        // order.
        f = awaitQuietly(f, deadline);
      }
      sent.put(p.getKey(), f);
    }
    ObjectNode ack = Json.MAPPER.createObjectNode();
    ArrayNode accepted = ack.putArray("accepted");
    ArrayNode rejected = ack.putArray("rejected");
    RuntimeException failed = null;
    int answered = 0;
    for (Map.Entry<String, CompletableFuture<Message>> e : sent.entrySet()) {
      try {
        Event re = Event.decode(Requester.await(e.getKey(), e.getValue(), deadline));
        if (Codes.ERROR.equals(re.type)) {
          throw Requester.errorOf(re);
        }
        answered++;
        JsonNode data = re.dataTree();
        if (parts.get(e.getKey()).has("groups")) {
          for (JsonNode r : data.path("rejected")) {
            LOG.log(System.Logger.Level.ERROR, "worker: group " + r.path("name").asText() + " rejected: " + r.path("reason").asText());
          }
          continue;
        }
        data.path("accepted").forEach(accepted::add);
        data.path("rejected").forEach(rejected::add);
      } catch (RuntimeException x) {
        failed = failed == null ? x : failed;
      }
    }
    if (failed == null) {
      acknowledged = true;
    }
    if (failed != null && answered == 0) {
      throw failed;
    }
    if (failed != null) {
      LOG.log(System.Logger.Level.WARNING, "worker: part of a registration not acknowledged: " + failed.getMessage());
    }
    return ack;
  }
}
