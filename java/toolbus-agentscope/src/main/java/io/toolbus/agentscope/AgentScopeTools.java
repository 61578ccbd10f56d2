package io.toolbus.agentscope;

import com.fasterxml.jackson.databind.JsonNode;
import io.agentscope.core.agent.RuntimeContext;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolResultState;
import io.agentscope.core.message.ToolUseBlock;
import io.agentscope.core.permission.PermissionBehavior;
import io.agentscope.core.permission.PermissionDecision;
import io.agentscope.core.permission.PermissionContextState;
import io.agentscope.core.state.AgentState;
import io.agentscope.core.tool.AgentTool;
import io.agentscope.core.tool.ToolBase;
import io.agentscope.core.tool.ToolCallParam;
import io.agentscope.core.tool.Toolkit;
import io.toolbus.Block;
import io.toolbus.Codes;
import io.toolbus.ExecResult;
import io.toolbus.Json;
import io.toolbus.ToolCall;
import io.toolbus.ToolDef;
import io.toolbus.Worker;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Serves AgentScope tools on the bus: objects with {@code @Tool} methods and {@link ToolBase}
 * (or any {@link AgentTool}) become tools of a toolbus {@link Worker}, with their readOnly,
 * concurrencySafe, externalTool and stateInjected flags and the schema AgentScope's own
 * reflection makes. Each call runs through an AgentScope {@link Toolkit} (its validation,
 * presets and converters); {@code ToolEmitter} chunks become progress events; the call's user,
 * session and runtime context become a {@link RuntimeContext}, with user POJOs decoded from
 * context members named by {@link Builder#inject}.
 */
public final class AgentScopeTools {
  private final Toolkit toolkit = new Toolkit();
  private final Map<String, Class<?>> injected;
  private final Map<String, String> groups;
  private final Map<String, ToolCall> calls = new ConcurrentHashMap<>();

  private AgentScopeTools(Builder b) {
    this.injected = Map.copyOf(b.injected);
    this.groups = Map.copyOf(b.groups);
    for (Object o : b.objects) {
      toolkit.registerTool(o);
    }
    toolkit.setChunkCallback(this::onChunk);
  }

  public static Builder builder() {
    return new Builder();
  }

  /** Collects the tools to serve. */
  public static final class Builder {
    private final List<Object> objects = new ArrayList<>();
    private final Map<String, Class<?>> injected = new LinkedHashMap<>();
    private final Map<String, String> groups = new LinkedHashMap<>();

    /** An object with {@code @Tool} methods, or an AgentTool / ToolBase instance. */
    public Builder tool(Object o) { objects.add(o); return this; }

    /** Decodes the runtime context's member key into type and offers it to tools by type. */
    public Builder inject(String key, Class<?> type) { injected.put(key, type); return this; }

    /** Puts tool in the bus group (define it on the worker with {@code Worker.Builder.group}). */
    public Builder group(String tool, String group) { groups.put(tool, group); return this; }

    public AgentScopeTools build() { return new AgentScopeTools(this); }
  }

  /** The tools' names, sorted. */
  public List<String> names() {
    return new ArrayList<>(new TreeSet<>(toolkit.getToolNames()));
  }

  /** The bus definition of tool name, from AgentScope's schema and flags. */
  public ToolDef definition(String name) {
    AgentTool t = toolkit.getTool(name);
    ToolDef.Builder b = ToolDef.builder(name).description(t.getDescription()).inputSchema(t.getParameters())
        .readOnly(t.isReadOnly());
    if (t.getOutputSchema() != null) {
      b.outputSchema(t.getOutputSchema());
    }
    if (t instanceof ToolBase tb) {
      b.concurrencySafe(tb.isConcurrencySafe()).external(tb.isExternalTool()).stateInjected(tb.isStateInjected());
      b.permission(permission(tb));
    }
    if (groups.containsKey(name)) {
      b.groups(groups.get(name));
    }
    return b.build();
  }

  /**
   * The bus permission of a tool from its checkPermissions on an empty input: ALLOW is allow, ASK
   * is ask, anything else passthrough (the per-input decision runs again at each call).
   */
  static String permission(ToolBase tb) {
    try {
      PermissionDecision d = tb.checkPermissions(Map.of(), PermissionContextState.builder().build()).block(Duration.ofSeconds(5));
      if (d == null) {
        return "passthrough";
      }
      return switch (d.getBehavior()) {
        case ALLOW -> "allow";
        case ASK -> "ask";
        default -> "passthrough";
      };
    } catch (RuntimeException e) {
      return "passthrough";
    }
  }

  /** Adds every tool to worker (before it starts). */
  public Worker serveOn(Worker worker) {
    for (String name : names()) {
      worker.tool(definition(name), c -> run(name, c));
    }
    return worker;
  }

  private Object run(String name, ToolCall c) {
    AgentTool t = toolkit.getTool(name);
    @SuppressWarnings("unchecked")
    Map<String, Object> input = Json.MAPPER.convertValue(c.input(), Map.class);
    if (t instanceof ToolBase tb && !tb.isExternalTool()) {
      PermissionDecision d = tb.checkPermissions(input, PermissionContextState.builder().build()).block(Duration.ofSeconds(30));
      if (d != null && d.getBehavior() == PermissionBehavior.DENY) {
        return ExecResult.error("Error: Permission denied: " + (d.getMessage() == null ? name : d.getMessage()));
      }
    }
    ToolUseBlock use = new ToolUseBlock(c.key(), name, input, Json.text(c.input()), null);
    calls.put(c.key(), c);
    try {
      RuntimeContext rc = context(c);
      AgentState state = t instanceof ToolBase tb && tb.isStateInjected() ? SessionState.read(c) : null;
      String before = state == null ? null : state.toJson();
      if (state != null) {
        rc.setAgentState(state);
      }
      ToolCallParam p = ToolCallParam.builder().toolUseBlock(use).input(input).runtimeContext(rc).build();
      Duration wait = c.deadline() == null ? Duration.ofMinutes(5) : Duration.between(Instant.now(), c.deadline()).plusSeconds(1);
      ToolResultBlock r = toolkit.callTool(p).block(wait.isNegative() ? Duration.ofMillis(1) : wait);
      if (state != null && !state.toJson().equals(before)) {
        SessionState.write(c, state);
      }
      return result(r);
    } finally {
      calls.remove(c.key());
    }
  }

  /** The call's runtime context as AgentScope's: session, user, members, injected POJOs. */
  RuntimeContext context(ToolCall c) {
    RuntimeContext.Builder b = RuntimeContext.builder().sessionId(c.sessionId());
    if (c.user() != null) {
      b.userId(c.userString());
    }
    JsonNode ctx = c.context();
    if (ctx != null && ctx.isObject()) {
      ctx.fields().forEachRemaining(f -> {
        if (!injected.containsKey(f.getKey())) {
          b.put(f.getKey(), Json.MAPPER.convertValue(f.getValue(), Object.class));
        }
      });
    }
    RuntimeContext rc = b.build();
    injected.forEach((key, type) -> put(rc, type, c.contextValue(key, type)));
    return rc;
  }

  @SuppressWarnings("unchecked")
  private static <T> void put(RuntimeContext rc, Class<T> type, Object v) {
    if (v != null) {
      rc.put(type, (T) v);
    }
  }

  /** An AgentScope result as the bus's: ERROR (or an "Error:" text) is an error result. */
  static ExecResult result(ToolResultBlock r) {
    if (r == null) {
      return ExecResult.error("Error: Tool execution failed: Tool completed without returning a result");
    }
    List<Block> out = Blocks.toBus(r.getOutput());
    if (r.isSuspended()) {
      return new ExecResult(Codes.STATE_ERROR, out, Json.tree(Map.of("agentscope_suspended", true)), null);
    }
    boolean failed = r.getState() == ToolResultState.ERROR
        || (r.getState() != ToolResultState.SUCCESS && !out.isEmpty() && "text".equals(out.get(0).type())
            && (out.get(0).text().startsWith("Error: ") || out.get(0).text().startsWith("[ERROR]")));
    return new ExecResult(failed ? Codes.STATE_ERROR : Codes.STATE_SUCCESS, out, null, null);
  }

  private void onChunk(ToolUseBlock use, ToolResultBlock chunk) {
    ToolCall c = calls.get(use.getId());
    if (c != null) {
      try {
        c.progress(Blocks.toBus(chunk.getOutput()));
      } catch (Exception e) {
        // progress is best effort: the result still comes
      }
    }
  }
}
