package io.toolbus.agentscope;

import com.fasterxml.jackson.databind.JsonNode;
import io.agentscope.core.message.Msg;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolResultMessage;
import io.agentscope.core.message.ToolResultState;
import io.agentscope.core.message.ToolUseBlock;
import io.toolbus.Answer;
import io.toolbus.Codes;
import io.toolbus.Event;
import io.toolbus.Json;
import io.toolbus.Result;
import io.toolbus.ToolbusClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BiConsumer;

/**
 * The calls a {@link BusToolkit} left parked: it follows the session's events, so that a call
 * answered from anywhere (another process, {@code toolbus confirm}, {@link #answer}) has its
 * result here, and builds the message that resumes the agent.
 */
public final class ParkedCalls {
  private final ToolbusClient client;
  private final String session;
  private final Map<String, String> replyOf = new ConcurrentHashMap<>(); // call id -> reply id
  private final Map<String, Result> results = new ConcurrentHashMap<>(); // reply.call -> result
  // reply ids of batches sent and not yet suspended: their results may come before their parked
  // calls are known; any other result is none of this toolkit's and is not kept
  private final java.util.Set<String> sending = ConcurrentHashMap.newKeySet();
  private final Map<String, ToolUseBlock> running = new ConcurrentHashMap<>(); // call id -> use
  private final Map<Boolean, BiConsumer<ToolUseBlock, ToolResultBlock>> chunks = new ConcurrentHashMap<>();

  ParkedCalls(ToolbusClient client, String session) {
    this.client = client;
    this.session = session;
  }

  void parked(String callId, String replyId) {
    replyOf.put(callId, replyId);
  }

  /** Marks a batch as sent (true) or as suspended, its parked calls known (false): then the
   * results kept of its other calls are dropped. */
  void sending(String replyId, boolean on) {
    if (on) {
      sending.add(replyId);
      return;
    }
    sending.remove(replyId);
    results.keySet().removeIf(k -> k.startsWith(replyId + ".") && !replyId.equals(replyOf.get(k.substring(replyId.length() + 1))));
  }

  /**
   * Sets the receiver of the running calls' progress, as AgentScope's chunk callbacks get it:
   * the internal one (ReActAgent's, replaced every acting step) or the user's; null removes it.
   */
  void chunks(boolean internal, BiConsumer<ToolUseBlock, ToolResultBlock> cb) {
    if (cb == null) {
      chunks.remove(internal);
    } else {
      chunks.put(internal, cb);
    }
  }

  /** Marks calls as running (their progress goes to the chunk callbacks) or, with false, done. */
  void running(List<ToolUseBlock> uses, boolean on) {
    uses.forEach(u -> {
      if (on) {
        running.put(u.getId(), u);
      } else {
        running.remove(u.getId(), u);
      }
    });
  }

  /** Takes call.progress, call.result and batch.done events of the session. */
  void onEvent(Event e) {
    if (Codes.CALL_PROGRESS.equals(e.type)) {
      ToolUseBlock u = e.toolcallid == null ? null : running.get(e.toolcallid);
      if (u != null) {
        try {
          List<io.toolbus.Block> out = Json.MAPPER.convertValue(e.dataTree().path("output"),
              Json.MAPPER.getTypeFactory().constructCollectionType(List.class, io.toolbus.Block.class));
          ToolResultBlock chunk = ToolResultBlock.of(Blocks.toAgentScope(out));
          chunks.values().forEach(cb -> cb.accept(u, chunk));
        } catch (RuntimeException ex) {
          // a malformed progress event changes nothing
        }
      }
      return;
    }
    if (!Codes.CALL_RESULT.equals(e.type) && !Codes.BATCH_DONE.equals(e.type)) {
      return;
    }
    JsonNode d = e.dataTree();
    List<JsonNode> rs = new ArrayList<>();
    if (Codes.CALL_RESULT.equals(e.type)) {
      rs.add(d);
    } else {
      d.path("results").forEach(rs::add);
    }
    for (JsonNode n : rs) {
      try {
        Result r = Json.decode(n, Result.class, Codes.BAD_EVENT, e.type);
        if (sending.contains(e.replyid) || e.replyid != null && e.replyid.equals(replyOf.get(r.id()))) {
          results.put(e.replyid + "." + r.id(), r);
        }
      } catch (RuntimeException ex) {
        // a malformed event changes nothing
      }
    }
    synchronized (this) {
      notifyAll();
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
   * Waits until every suspended call of the agent's reply has its result on the bus and returns
   * the message that resumes the agent: {@code agent.call(parked.awaitResults(reply, timeout))}.
   */
  public synchronized Msg awaitResults(Msg suspended, Duration timeout) throws InterruptedException {
    long end = System.nanoTime() + timeout.toNanos();
    List<ToolResultBlock> out = new ArrayList<>();
    for (String id : suspendedIds(suspended)) {
      String key = replyOf.get(id) + "." + id;
      for (long left = end - System.nanoTime(); !results.containsKey(key); left = end - System.nanoTime()) {
        if (left <= 0) {
          throw new IllegalStateException("call " + id + " was not answered within " + timeout);
        }
        wait(Math.max(1, left / 1_000_000));
      }
      out.add(Results.plain(results.get(key)));
    }
    for (String id : suspendedIds(suspended)) { // handed over: kept no longer
      results.remove(replyOf.remove(id) + "." + id);
    }
    return new ToolResultMessage(out);
  }

  /**
   * Answers parked external or request-scoped calls on the bus with the caller's own results, as
   * AgentScope's caller would hand them to the agent; then resume with {@link #awaitResults}.
   */
  public void answer(ToolResultBlock... rs) {
    for (ToolResultBlock r : rs) {
      String reply = replyOf.get(r.getId());
      if (reply == null) {
        throw new IllegalArgumentException("Invalid tool result ID: " + r.getId() + " is not a parked call of this toolkit");
      }
      List<io.toolbus.Block> out = Blocks.toBus(r.getOutput());
      client.answer(session, reply, r.getId(), r.getName(), r.getState() == ToolResultState.ERROR ? Answer.error(out) : Answer.success(out));
    }
  }

  /** Allows or denies a call parked for confirmation (on the bus's P.approve subject). */
  public void confirm(String callId, String tool, boolean allow, String reason) {
    String reply = replyOf.get(callId);
    if (reply == null) {
      throw new IllegalArgumentException("call " + callId + " is not a parked call of this toolkit");
    }
    client.confirm(session, reply, callId, tool, allow, reason);
  }
}
