package io.toolbus.agentscope;

import com.fasterxml.jackson.databind.JsonNode;
import io.agentscope.core.agent.Agent;
import io.agentscope.core.agent.RuntimeContext;
import io.agentscope.core.event.AgentEvent;
import io.agentscope.core.event.RequireExternalExecutionEvent;
import io.agentscope.core.event.RequireUserConfirmEvent;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolUseBlock;
import io.agentscope.core.model.ExecutionConfig;
import io.agentscope.core.model.ToolSchema;
import io.agentscope.core.tool.AgentTool;
import io.agentscope.core.tool.ToolCallParam;
import io.agentscope.core.tool.Toolkit;
import io.toolbus.EventWatch;
import io.toolbus.Json;
import io.toolbus.ToolbusClient;
import io.toolbus.ToolsList;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;
import reactor.core.publisher.Mono;
import reactor.core.scheduler.Schedulers;

/**
 * toolbus as a ReActAgent's {@link Toolkit}: the agent sees the tools the bus lists for one
 * session (groups, reset_tools, the skill loader, request-scoped tools) and each turn's tool calls
 * run as one bus batch. With {@code enableMetaTool(true)} the agent sees AgentScope's
 * reset_equipped_tools over the bus's groups instead of reset_tools. A call the bus parks (an
 * external tool, a confirmation, a request-scoped tool) suspends the agent the AgentScope way (a
 * suspended ToolResultBlock; the reply ends with TOOL_SUSPENDED) and is announced with
 * AgentScope's own {@link RequireExternalExecutionEvent} / {@link RequireUserConfirmEvent};
 * {@link #parked()} resumes it once answered from anywhere. Close it to stop following events.
 */
public class BusToolkit extends Toolkit implements AutoCloseable {
  private final Shared sh;

  /** State shared by the copies ReActAgent makes of its toolkit. */
  private static final class Shared {
    ToolbusClient client;
    String session;
    JsonNode user;
    JsonNode context;
    volatile BusRequestConfig request;
    volatile boolean agentScopeMeta;
    volatile ToolsList last;
    final Map<String, AgentTool> tools = new ConcurrentHashMap<>();
    final List<Consumer<AgentEvent>> listeners = new CopyOnWriteArrayList<>();
    ParkedCalls parked;
    EventWatch watch;
  }

  private BusToolkit(Shared sh) {
    this.sh = sh;
  }

  /** A toolkit for session on the bus client talks to. */
  public static Builder builder(ToolbusClient client, String session) {
    return new Builder(client, io.toolbus.Ids.requireId("session id", session));
  }

  /** Configures a BusToolkit. */
  public static final class Builder {
    private final Shared sh = new Shared();

    private Builder(ToolbusClient client, String session) {
      sh.client = client;
      sh.session = session;
    }

    /** The runtime user of every batch and listing (selects skills; reaches workers). */
    public Builder user(Object u) { sh.user = u == null ? null : Json.tree(u); return this; }
    /** The runtime context of every batch (reaches workers, never the model). */
    public Builder context(Object c) { sh.context = c == null ? null : Json.tree(c); return this; }
    /** Request-scoped tools and their merge mode (see {@link BusToolkit#request}). */
    public Builder request(BusRequestConfig r) { sh.request = r; return this; }
    /** A listener of AgentScope's suspension events for parked calls. */
    public Builder onEvent(Consumer<AgentEvent> l) { sh.listeners.add(l); return this; }

    public BusToolkit build() {
      sh.parked = new ParkedCalls(sh.client, sh.session);
      sh.watch = sh.client.watch(sh.session, sh.parked::onEvent);
      return new BusToolkit(sh);
    }
  }

  /** Request-scoped tools and their merge mode for the following listings and batches; null clears. */
  public BusToolkit request(BusRequestConfig r) {
    sh.request = r;
    return this;
  }

  /** The calls left parked: await their results, answer or confirm them. */
  public ParkedCalls parked() {
    return sh.parked;
  }

  /** The skills prompt of the last listing (docs/protocol.md 10). */
  public String skillsPrompt() {
    ToolsList l = sh.last;
    return l == null || l.skillsPrompt() == null ? "" : l.skillsPrompt();
  }

  /** ReActAgent calls this when built with enableMetaTool(true): show reset_equipped_tools. */
  @Override
  public void registerMetaTool() {
    sh.agentScopeMeta = true;
  }

  @Override
  public List<ToolSchema> getToolSchemas() {
    ToolsList l = sh.client.tools(sh.session, "toolbus", sh.request == null ? null : sh.request.toRequest(), sh.user);
    sh.last = l;
    List<ToolSchema> out = new ArrayList<>();
    // a name listed twice (a worker's tool named as the router's reset_tools or skill loader) runs
    // the router's, listed last (4.3): the model sees that one only (docs/security.md)
    java.util.Map<String, JsonNode> last = new java.util.HashMap<>();
    l.tools().forEach(def -> last.put(def.path("name").asText(), def));
    for (JsonNode def : l.tools()) {
      if (last.get(def.path("name").asText()) != def) {
        continue;
      }
      BusTool t = new BusTool(this, def);
      if (sh.agentScopeMeta && (MetaTool.NAME.equals(t.getName())
          || MetaTool.BUS_NAME.equals(t.getName()) && !def.path("external").asBoolean(false))) {
        // the bus's meta tool, shown as AgentScope's below; a bus tool named as AgentScope's (a
        // hostile worker's) would show its description beside it and never run (docs/security.md)
        continue;
      }
      sh.tools.put(t.getName(), t);
      out.add(ToolSchema.builder().name(t.getName()).description(t.getDescription()).parameters(t.getParameters()).build());
    }
    if (sh.agentScopeMeta) {
      out.add(MetaTool.schema(l));
    }
    return out;
  }

  /** The bus decides what is active: AgentScope's activated groups play no part. */
  @Override
  public List<ToolSchema> getToolSchemas(java.util.Collection<String> activeGroups) {
    return getToolSchemas();
  }

  @Override
  public AgentTool getTool(String name) {
    return sh.tools.get(name);
  }

  @Override
  public Set<String> getToolNames() {
    return new LinkedHashSet<>(sh.tools.keySet());
  }

  /** The copy ReActAgent's builder makes shares this toolkit's session and event watch. */
  @Override
  public Toolkit copy() {
    return new BusToolkit(sh);
  }

  @Override
  public Mono<ToolResultBlock> callTool(ToolCallParam param) {
    return callTools(List.of(param.getToolUseBlock()), null, param.getAgent(), param.getRuntimeContext()).map(l -> l.get(0));
  }

  /** Runs the turn's calls as one bus batch; parked calls come back suspended. */
  @Override
  public Mono<List<ToolResultBlock>> callTools(List<ToolUseBlock> calls, ExecutionConfig cfg, Agent agent, RuntimeContext rc) {
    return Mono.fromCallable(() -> new Turn(sh.client, sh.session, sh.parked, sh.tools, sh.listeners, this::settle)
        .run(calls, sh.user, sh.context, sh.request, sh.agentScopeMeta ? sh.last : null, rc))
        .subscribeOn(Schedulers.boundedElastic());
  }

  /** Bus progress of a running call reaches ReActAgent's streaming as AgentScope chunks. */
  @Override
  public void setInternalChunkCallback(java.util.function.BiConsumer<ToolUseBlock, ToolResultBlock> cb) {
    sh.parked.chunks(true, cb);
  }

  /** Bus progress of a running call reaches cb as AgentScope chunks (ToolEmitter's). */
  @Override
  public void setChunkCallback(java.util.function.BiConsumer<ToolUseBlock, ToolResultBlock> cb) {
    sh.parked.chunks(false, cb);
  }

  private void settle() {
    try {
      sh.watch.settle(java.time.Duration.ofSeconds(1));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void close() {
    if (sh.watch != null) {
      sh.watch.close();
    }
  }
}
