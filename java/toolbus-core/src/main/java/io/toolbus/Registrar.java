package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.nats.client.Connection;
import java.time.Duration;
import java.util.List;
import java.util.function.Supplier;

/**
 * Registers a worker (docs/protocol.md 7.1): the whole registration every heartbeat, with the
 * calls it holds ({@code inflight}) and {@code binary_exec}, and the leave of a drain.
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

  Registrar(Connection nc, Subjects subj, String id, String source, List<Group> groups, Duration heartbeat,
      Supplier<List<ToolDef>> tools, CallTable calls) {
    this.nc = nc;
    this.subj = subj;
    this.id = id;
    this.source = source;
    this.groups = groups;
    this.heartbeat = heartbeat;
    this.tools = tools;
    this.calls = calls;
  }

  /** One beat; a registration no router answers is logged and sent again at the next. */
  void beat() {
    try {
      register();
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.WARNING, "worker: registration not acknowledged: " + e.getMessage());
    }
  }

  /** Sends the registration and returns the ack's data ({"accepted", "rejected"}). */
  JsonNode register() {
    ObjectNode reg = Json.MAPPER.createObjectNode();
    reg.put("worker", id);
    if (!groups.isEmpty()) {
      reg.set("groups", Json.tree(groups));
    }
    reg.set("tools", Json.tree(tools.get()));
    reg.set("inflight", Json.tree(calls.byTool()));
    reg.put("binary_exec", true);
    JsonNode ack = send(reg, heartbeat);
    for (JsonNode r : ack.path("rejected")) {
      LOG.log(System.Logger.Level.ERROR, "worker: tool " + r.path("name").asText() + " rejected: " + r.path("reason").asText());
    }
    return ack;
  }

  /** Tells the routers the worker leaves (within a second; a failure is only logged). */
  void leave() {
    try {
      send(Json.MAPPER.createObjectNode().put("worker", id).put("leaving", true), Duration.ofSeconds(1));
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.DEBUG, "worker: leaving not acknowledged: " + e.getMessage());
    }
  }

  private JsonNode send(ObjectNode reg, Duration timeout) {
    Event e = Event.of(Codes.REGISTER, source, reg);
    return new Requester(nc).request(subj.register(), e, Codes.REGISTER_ACK, timeout).dataTree();
  }
}
