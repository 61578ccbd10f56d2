package io.toolbus;

import io.nats.client.Message;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The calls a worker holds: accepted (listed in every heartbeat's inflight, 5.7), running
 * (cancellable by key), and the cancels seen in the last two minutes (3.5), so an exec request
 * overtaken by its cancel never runs.
 */
final class CallTable {
  static final Duration CANCEL_MEMORY = Duration.ofMinutes(2);

  private final Subjects subj;
  private final Map<String, String> queued = new HashMap<>(); // key -> tool
  private final Map<String, ToolCall> running = new HashMap<>();
  private final Map<String, Long> cancelled = new HashMap<>(); // key (or reply prefix) -> nanos

  CallTable(Subjects subj) {
    this.subj = subj;
  }

  synchronized void queue(String key, String tool) {
    queued.put(key, tool);
  }

  synchronized void unqueue(String key) {
    queued.remove(key);
  }

  synchronized int queuedCount() {
    return queued.size();
  }

  /** The registration's inflight: per tool, the keys accepted and not yet answered. */
  synchronized Map<String, List<String>> byTool() {
    Map<String, List<String>> out = new HashMap<>();
    queued.forEach((k, t) -> out.computeIfAbsent(t, x -> new ArrayList<>()).add(k));
    return out;
  }

  /** Lists c as running; reports whether a cancel came first. */
  synchronized boolean begin(ToolCall c) {
    running.put(c.key(), c);
    return cancelled.containsKey(Ids.callKey(c.sessionId(), c.replyId(), "")) || cancelled.containsKey(c.key());
  }

  synchronized void end(ToolCall c) {
    running.remove(c.key(), c);
  }

  synchronized List<ToolCall> runningCalls() {
    return new ArrayList<>(running.values());
  }

  /** Takes an io.toolbus.call.cancel from P.cancel.<session>. */
  void onCancel(Message m) {
    String session = subj.token(m.getSubject(), "cancel");
    if (session == null) {
      return;
    }
    Event e;
    List<String> calls = new ArrayList<>();
    try {
      e = Event.decode(m);
      if (!Codes.CALL_CANCEL.equals(e.type) || e.replyid == null || e.replyid.isEmpty()) {
        return;
      }
      if (e.hasData()) {
        e.dataTree().path("calls").forEach(n -> calls.add(n.asText()));
      }
    } catch (BusException ex) {
      return;
    }
    long now = System.nanoTime();
    List<ToolCall> stop = new ArrayList<>();
    synchronized (this) {
      cancelled.values().removeIf(at -> now - at > CANCEL_MEMORY.toNanos());
      if (calls.isEmpty()) {
        String prefix = Ids.callKey(session, e.replyid, "");
        cancelled.put(prefix, now);
        running.forEach((k, c) -> {
          if (k.startsWith(prefix)) {
            stop.add(c);
          }
        });
      }
      for (String id : calls) {
        String k = Ids.callKey(session, e.replyid, id);
        cancelled.put(k, now);
        ToolCall c = running.get(k);
        if (c != null) {
          stop.add(c);
        }
      }
    }
    stop.forEach(c -> c.stop(ToolCall.Stop.CANCELLED));
  }
}
