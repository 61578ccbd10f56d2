package io.toolbus.agentscope;

import com.fasterxml.jackson.databind.JsonNode;
import io.agentscope.core.agent.Agent;
import io.agentscope.core.agent.RuntimeContext;
import io.agentscope.core.event.AgentEvent;
import io.agentscope.core.event.RequireExternalExecutionEvent;
import io.agentscope.core.event.RequireUserConfirmEvent;
import io.agentscope.core.message.Msg;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolResultMessage;
import io.agentscope.core.message.ToolResultState;
import io.agentscope.core.message.ToolUseBlock;
import io.agentscope.core.model.ExecutionConfig;
import io.agentscope.core.model.ToolSchema;
import io.agentscope.core.tool.AgentTool;
import io.agentscope.core.tool.ToolCallParam;
import io.agentscope.core.tool.ToolSuspendException;
import io.agentscope.core.tool.Toolkit;
import io.toolbus.Answer;
import io.toolbus.Batch;
import io.toolbus.Codes;
import io.toolbus.Event;
import io.toolbus.EventWatch;
import io.toolbus.Json;
import io.toolbus.Parked;
import io.toolbus.Reply;
import io.toolbus.Result;
import io.toolbus.ToolbusClient;
import io.toolbus.ToolsList;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
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
 * session (groups, reset_tools, the skill loader, request-scoped tools) and every turn's tool
 * calls run as one bus batch. A call the bus parks (an external tool, a confirmation, a
 * request-scoped tool) suspends the agent the AgentScope way (a suspended ToolResultBlock, the
 * agent's reply ending with TOOL_SUSPENDED) and is announced with AgentScope's own
 * {@link RequireExternalExecutionEvent} / {@link RequireUserConfirmEvent} to {@link
 * #onEvent} listeners; {@link #awaitResults} waits until it is answered from anywhere and returns
 * the message that resumes the agent. Close it to stop watching the session.
 */
public class BusToolkit extends Toolkit implements AutoCloseable {
  private final Shared sh;

  /** State shared by the copies ReActAgent makes of its toolkit. */
  private static final class Shared {
    final ToolbusClient client;
    final String session;
    volatile JsonNode user;
    volatile JsonNode context;
    volatile BusRequestConfig request;
    final Map<String, AgentTool> tools = new ConcurrentHashMap<>();
    final Map<String, String> replyOf = new ConcurrentHashMap<>(); // call id -> reply id
    final Map<String, Result> results = new ConcurrentHashMap<>(); // reply.call -> result
    final List<Consumer<AgentEvent>> listeners = new CopyOnWriteArrayList<>();
    volatile String skillsPrompt = "";
    EventWatch watch;

    Shared(ToolbusClient client, String session) {
      this.client = client;
      this.session = session;
    }
  }

  private BusToolkit(Shared sh) {
    this.sh = sh;
  }

  /** A toolkit for session on the bus the client talks to. */
  public static BusToolkit of(ToolbusClient client, String session) {
    Shared sh = new Shared(client, io.toolbus.Ids.requireId("session id", session));
    BusToolkit k = new BusToolkit(sh);
    sh.watch = client.watch(session, k::onBusEvent);
    return k;
  }

  /** The runtime user sent with every batch and listing (selects skills; reaches workers). */
  public BusToolkit user(Object u) { sh.user = u == null ? null : Json.tree(u); return this; }

  /** The runtime context sent with every batch (reaches workers, never the model). */
  public BusToolkit context(Object c) { sh.context = c == null ? null : Json.tree(c); return this; }

  /** Request-scoped tools and their merge mode for the following listings and batches; null clears. */
  public BusToolkit request(BusRequestConfig r) { sh.request = r; return this; }

  /** Listens for AgentScope's suspension events of parked calls. */
  public BusToolkit onEvent(Consumer<AgentEvent> l) { sh.listeners.add(l); return this; }

  public String session() { return sh.session; }

  /** The skills prompt of the last listing (docs/protocol.md 10). */
  public String skillsPrompt() { return sh.skillsPrompt; }

  // ---- what the model sees ----

  @Override
  public List<ToolSchema> getToolSchemas() {
    ToolsList l = sh.client.tools(sh.session, "toolbus", sh.request == null ? null : sh.request.toRequest(), sh.user);
    sh.skillsPrompt = l.skillsPrompt() == null ? "" : l.skillsPrompt();
    List<ToolSchema> out = new ArrayList<>();
    for (JsonNode def : l.tools()) {
      BusTool t = new BusTool(this, def);
      sh.tools.put(t.getName(), t);
      out.add(ToolSchema.builder().name(t.getName()).description(t.getDescription()).parameters(t.getParameters()).build());
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

  /** The copy ReActAgent's builder makes shares this toolkit's session and watch. */
  @Override
  public Toolkit copy() {
    return new BusToolkit(sh);
  }

  // ---- running calls ----

  @Override
  public Mono<ToolResultBlock> callTool(ToolCallParam param) {
    return callTools(List.of(param.getToolUseBlock()), null, param.getAgent(), param.getRuntimeContext()).map(l -> l.get(0));
  }

  /** Runs the turn's calls as one bus batch; parked calls come back suspended. */
  @Override
  public Mono<List<ToolResultBlock>> callTools(List<ToolUseBlock> calls, ExecutionConfig cfg, Agent agent, RuntimeContext rc) {
    return Mono.fromCallable(() -> runBatch(calls, rc)).subscribeOn(Schedulers.boundedElastic());
  }

  private List<ToolResultBlock> runBatch(List<ToolUseBlock> calls, RuntimeContext rc) {
    Batch.Builder b = Batch.builder();
    for (ToolUseBlock u : calls) {
      b.call(u.getId(), u.getName(), u.getContent() != null && !u.getContent().isBlank() ? u.getContent() : (Object) u.getInput());
    }
    JsonNode user = sh.user;
    if (user == null && rc != null && rc.getUserId() != null) {
      user = Json.tree(rc.getUserId());
    }
    b.user(user).context(sh.context);
    if (sh.request != null) {
      b.request(sh.request.toRequest());
    }
    String replyId = ToolbusClient.newReplyId();
    Reply r = sh.client.call(sh.session, replyId, b.build(), null);
    List<ToolUseBlock> external = new ArrayList<>();
    List<ToolUseBlock> confirm = new ArrayList<>();
    Map<String, ToolResultBlock> byId = new LinkedHashMap<>();
    for (Result res : r.results()) {
      byId.put(res.id(), toAgentScope(res));
    }
    for (Parked p : r.parked()) {
      sh.replyOf.put(p.id(), replyId);
      ToolUseBlock u = calls.stream().filter(c -> c.getId().equals(p.id())).findFirst().orElseThrow();
      String reason = switch (p.kind()) {
        case Codes.KIND_CONFIRM -> "[Awaiting user confirmation]";
        case Codes.KIND_QUEUED -> "[Awaiting the answers of earlier calls]";
        default -> null; // AgentScope's own "[Awaiting external execution]"
      };
      byId.put(p.id(), ToolResultBlock.suspended(u, new ToolSuspendException(reason)));
      (Codes.KIND_CONFIRM.equals(p.kind()) ? confirm : external).add(u);
    }
    if (!external.isEmpty()) {
      emit(new RequireExternalExecutionEvent(replyId, external));
    }
    if (!confirm.isEmpty()) {
      emit(new RequireUserConfirmEvent(replyId, confirm));
    }
    List<ToolResultBlock> out = new ArrayList<>();
    for (ToolUseBlock u : calls) {
      out.add(byId.get(u.getId()));
    }
    return out;
  }

  private void emit(AgentEvent e) {
    for (Consumer<AgentEvent> l : sh.listeners) {
      l.accept(e);
    }
  }

  /** A bus result as AgentScope's ToolResultBlock, state and texts kept. */
  static ToolResultBlock toAgentScope(Result r) {
    ToolResultState st = switch (r.state()) {
      case Codes.STATE_SUCCESS -> ToolResultState.SUCCESS;
      case Codes.STATE_DENIED -> ToolResultState.DENIED;
      case Codes.STATE_INTERRUPTED -> ToolResultState.INTERRUPTED;
      default -> ToolResultState.ERROR;
    };
    Map<String, Object> meta = new LinkedHashMap<>();
    if (r.error() != null) {
      meta.put("toolbus_code", r.error().code());
    }
    return new ToolResultBlock(r.id(), r.name(), Blocks.toAgentScope(r.output()), meta, st);
  }

  // ---- parked calls ----

  private void onBusEvent(Event e) {
    if (Codes.CALL_RESULT.equals(e.type) || Codes.BATCH_DONE.equals(e.type)) {
      JsonNode d = e.dataTree();
      List<JsonNode> rs = new ArrayList<>();
      if (Codes.CALL_RESULT.equals(e.type)) {
        rs.add(d);
      } else {
        d.path("results").forEach(rs::add);
      }
      for (JsonNode n : rs) {
        Result r = Json.decode(n, Result.class, Codes.BAD_EVENT, e.type);
        sh.results.put(e.replyid + "." + r.id(), r);
      }
      synchronized (sh.results) {
        sh.results.notifyAll();
      }
    }
  }

  /** The ids of the suspended calls of an agent's TOOL_SUSPENDED reply. */
  public static List<String> suspendedIds(Msg suspended) {
    List<String> ids = new ArrayList<>();
    for (ToolResultBlock b : suspended.getContentBlocks(ToolResultBlock.class)) {
      if (b.isSuspended()) {
        ids.add(b.getId());
      }
    }
    return ids;
  }

  /**
   * Waits until every suspended call of the agent's reply has its result on the bus (answered
   * from anywhere: another process, {@code toolbus confirm}, {@link #answer}) and returns the
   * message that resumes the agent: {@code agent.call(toolkit.awaitResults(reply, timeout))}.
   */
  public Msg awaitResults(Msg suspended, Duration timeout) throws InterruptedException {
    List<String> ids = suspendedIds(suspended);
    long end = System.nanoTime() + timeout.toNanos();
    List<ToolResultBlock> out = new ArrayList<>();
    synchronized (sh.results) {
      for (String id : ids) {
        String key = sh.replyOf.get(id) + "." + id;
        for (long left = end - System.nanoTime(); !sh.results.containsKey(key); left = end - System.nanoTime()) {
          if (left <= 0) {
            throw new IllegalStateException("call " + id + " was not answered within " + timeout);
          }
          sh.results.wait(Math.max(1, left / 1_000_000));
        }
        out.add(toAgentScope(sh.results.get(key)));
      }
    }
    return new ToolResultMessage(out);
  }

  /**
   * Answers parked external or request-scoped calls on the bus with the caller's own results, as
   * AgentScope's caller would hand them to the agent. Then resume with {@link #awaitResults}.
   */
  public void answer(ToolResultBlock... results) {
    for (ToolResultBlock r : results) {
      String reply = sh.replyOf.get(r.getId());
      if (reply == null) {
        throw new IllegalArgumentException("Invalid tool result ID: " + r.getId() + " is not a parked call of this toolkit");
      }
      List<io.toolbus.Block> out = Blocks.toBus(r.getOutput());
      Answer a = r.getState() == ToolResultState.ERROR ? Answer.error(out) : Answer.success(out);
      sh.client.answer(sh.session, reply, r.getId(), r.getName(), a);
    }
  }

  /** Allows or denies a call parked for confirmation (the bus's P.approve subject). */
  public void confirm(String callId, String tool, boolean allow, String reason) {
    String reply = sh.replyOf.get(callId);
    if (reply == null) {
      throw new IllegalArgumentException("call " + callId + " is not a parked call of this toolkit");
    }
    sh.client.confirm(sh.session, reply, callId, tool, allow, reason);
  }

  @Override
  public void close() {
    if (sh.watch != null) {
      sh.watch.close();
    }
  }
}
