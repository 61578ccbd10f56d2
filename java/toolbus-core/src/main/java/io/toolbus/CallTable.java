package io.toolbus;

import io.nats.client.Message;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The calls a worker holds: accepted (listed in every heartbeat's inflight, 5.7), running
 * (cancellable by key), and the cancels seen in the last two minutes (3.5), so an exec request
 * overtaken by its cancel never runs.
 */
final class CallTable {
  static final Duration CANCEL_MEMORY = Duration.ofMinutes(2);
  /** Cancels remembered at most: any agent may publish cancels naming ids of its choosing, which every worker reads. */
  static final int MAX_CANCELLED = 65_536;

  private final Subjects subj;
  private final Map<String, String> queued = new HashMap<>(); // key -> tool
  private final Map<String, ToolCall> running = new HashMap<>();
  // key (or reply prefix) -> the cancel, in arrival order: the oldest are dropped first
  final LinkedHashMap<String, Seen> cancelled = new LinkedHashMap<>();

  /**
   * A cancel remembered: when it came (nanos) and its event's id, which the result of a call it
   * ends names (3.5, 1.30); null when the id is not one a result may name. One per cancel, shared by
   * the keys it names.
   */
  record Seen(long at, String id) {}

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

  /** Lists c as running; the cancel of it or of its reply that came first (within CANCEL_MEMORY), or null. */
  synchronized Seen begin(ToolCall c) {
    running.put(c.key(), c);
    if (cancelled.isEmpty()) {
      return null;
    }
    long now = System.nanoTime();
    Seen call = recent(cancelled.get(c.key()), now);
    return call != null ? call : recent(cancelled.get(Ids.callKey(c.sessionId(), c.replyId(), "")), now);
  }

  /** s (null: none) when it still counts at {@code now}, else null. */
  private static Seen recent(Seen s, long now) {
    return s != null && now - s.at() <= CANCEL_MEMORY.toNanos() ? s : null;
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
    if (!Ids.validId(session)) {
      return;
    }
    Event e;
    List<String> calls = new ArrayList<>();
    try {
      e = Event.decode(m);
      if (!Codes.CALL_CANCEL.equals(e.type) || !Ids.validId(e.replyid)) {
        return;
      }
      if (e.hasData()) {
        var named = e.dataTree().path("calls");
        if (named.size() > Codes.MAX_CANCEL_CALLS) {
          return; // bad input (3.5): no honest cancel names more; nothing is cancelled
        }
        named.forEach(n -> calls.add(n.asText()));
      }
    } catch (BusException ex) {
      return;
    }
    long now = System.nanoTime();
    Seen seen = new Seen(now, Ids.validId(e.id) ? e.id : null); // a megabyte's id would make the result too large to send
    List<ToolCall> stop = new ArrayList<>();
    synchronized (this) {
      if (calls.isEmpty()) {
        String prefix = Ids.callKey(session, e.replyid, "");
        remember(prefix, seen);
        running.forEach((k, c) -> {
          if (k.startsWith(prefix)) {
            stop.add(c);
          }
        });
      }
      for (String id : calls) {
        if (!Ids.validId(id)) {
          continue;
        }
        String k = Ids.callKey(session, e.replyid, id);
        remember(k, seen);
        ToolCall c = running.get(k);
        if (c != null) {
          stop.add(c);
        }
      }
      for (var it = cancelled.values().iterator(); it.hasNext(); ) { // the expired, and past the bound the oldest
        long at = it.next().at();
        if (cancelled.size() <= MAX_CANCELLED && now - at <= CANCEL_MEMORY.toNanos()) {
          break;
        }
        it.remove();
      }
    }
    stop.forEach(c -> c.cancel(seen.id()));
  }

  /** Remembers a cancel's key at the end of the arrival order. */
  private void remember(String key, Seen seen) {
    cancelled.remove(key);
    cancelled.put(key, seen);
  }
}
