package io.toolbus.agentscope;

import com.fasterxml.jackson.databind.JsonNode;
import io.agentscope.core.agent.RuntimeContext;
import io.agentscope.core.event.AgentEvent;
import io.agentscope.core.event.RequireExternalExecutionEvent;
import io.agentscope.core.event.RequireUserConfirmEvent;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolUseBlock;
import io.agentscope.core.tool.AgentTool;
import io.agentscope.core.tool.ToolSuspendException;
import io.toolbus.Batch;
import io.toolbus.Codes;
import io.toolbus.Json;
import io.toolbus.Parked;
import io.toolbus.Reply;
import io.toolbus.Result;
import io.toolbus.ToolbusClient;
import io.toolbus.ToolsList;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * One agent turn's tool calls as one bus batch: reset_equipped_tools checked and translated,
 * results in AgentScope's form, parked calls suspended and announced.
 */
final class Turn {
  private final ToolbusClient client;
  private final String session;
  private final ParkedCalls parked;
  private final Map<String, AgentTool> tools;
  private final List<Consumer<AgentEvent>> listeners;
  private final Runnable settle;

  Turn(ToolbusClient client, String session, ParkedCalls parked, Map<String, AgentTool> tools,
      List<Consumer<AgentEvent>> listeners, Runnable settle) {
    this.settle = settle;
    this.client = client;
    this.session = session;
    this.parked = parked;
    this.tools = tools;
    this.listeners = listeners;
  }

  /** Runs calls as one batch; meta, when not null, is the listing reset_equipped_tools was shown from. */
  List<ToolResultBlock> run(List<ToolUseBlock> calls, JsonNode userCfg, JsonNode context, BusRequestConfig request,
      ToolsList meta, RuntimeContext rc) {
    Map<String, ToolResultBlock> byId = new LinkedHashMap<>();
    Map<String, Map<String, Object>> metaCalls = new LinkedHashMap<>();
    Batch.Builder b = Batch.builder();
    int sent = 0;
    for (ToolUseBlock u : calls) {
      String input = u.getContent() != null && !u.getContent().isBlank() ? u.getContent() : Json.text(u.getInput());
      if (meta != null && MetaTool.NAME.equals(u.getName())) {
        Map<String, Object> in = MetaTool.parse(input);
        ToolResultBlock refused = MetaTool.check(u.getId(), input, in, meta);
        if (refused != null) {
          byId.put(u.getId(), refused);
          continue;
        }
        metaCalls.put(u.getId(), in);
        b.call(u.getId(), MetaTool.BUS_NAME, MetaTool.busInput(in));
      } else {
        b.call(u.getId(), u.getName(), input);
      }
      sent++;
    }
    if (sent > 0) {
      JsonNode user = userCfg != null ? userCfg : rc != null && rc.getUserId() != null ? Json.tree(rc.getUserId()) : null;
      b.user(user).context(context).request(request == null ? null : request.toRequest());
      String replyId = io.toolbus.Ids.next();
      parked.running(calls, true);
      parked.sending(replyId, true);
      try {
        Reply r;
        try {
          r = client.call(session, replyId, b.build(), null);
          settle.run(); // progress published before the result is in the watch's queue: hand it over
        } finally {
          parked.running(calls, false);
        }
        for (Result res : r.results()) {
          Map<String, Object> in = metaCalls.get(res.id());
          byId.put(res.id(), in != null && res.ok()
              ? Results.text(res.id(), MetaTool.NAME, MetaTool.reply(in, meta))
              : Results.toAgentScope(res, inputOf(calls, res.id()), schemaOf(res.name())));
        }
        suspend(calls, r.parked(), replyId, byId);
      } finally {
        parked.sending(replyId, false);
      }
    }
    List<ToolResultBlock> out = new ArrayList<>();
    calls.forEach(u -> out.add(byId.get(u.getId())));
    return out;
  }

  private void suspend(List<ToolUseBlock> calls, List<Parked> parked, String replyId, Map<String, ToolResultBlock> byId) {
    List<ToolUseBlock> external = new ArrayList<>();
    List<ToolUseBlock> confirm = new ArrayList<>();
    for (Parked p : parked) {
      this.parked.parked(p.id(), replyId);
      ToolUseBlock u = calls.stream().filter(c -> c.getId().equals(p.id())).findFirst().orElseThrow();
      String reason = switch (p.kind()) {
        case Codes.KIND_CONFIRM -> "[Awaiting user confirmation]";
        case Codes.KIND_QUEUED -> "[Awaiting the answers of earlier calls]";
        default -> null; // AgentScope's own "[Awaiting external execution]"
      };
      byId.put(p.id(), ToolResultBlock.suspended(u, new ToolSuspendException(reason)));
      (Codes.KIND_CONFIRM.equals(p.kind()) ? confirm : external).add(u);
    }
    List<AgentEvent> events = new ArrayList<>();
    if (!external.isEmpty()) {
      events.add(new RequireExternalExecutionEvent(replyId, external));
    }
    if (!confirm.isEmpty()) {
      events.add(new RequireUserConfirmEvent(replyId, confirm));
    }
    events.forEach(e -> listeners.forEach(l -> l.accept(e)));
  }

  private static String inputOf(List<ToolUseBlock> calls, String id) {
    for (ToolUseBlock u : calls) {
      if (u.getId().equals(id)) {
        return u.getContent() != null && !u.getContent().isBlank() ? u.getContent() : Json.text(u.getInput());
      }
    }
    return null;
  }

  private Map<String, Object> schemaOf(String name) {
    AgentTool t = tools.get(name);
    return t == null ? null : t.getParameters();
  }

}
