package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Message;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Session 40, cancelbound40: a cancel names at most Codes.MAX_CANCEL_CALLS ids (3.5). */
class CancelBoundTest {
  static Message cancel(String session, String reply, List<String> ids) {
    Event e = Event.of(Codes.CALL_CANCEL, "attacker", Map.of("calls", ids));
    e.sessionid = "s1";
    e.replyid = reply;
    return e.toBinaryMessage("toolbus.cancel." + session, null);
  }

  static List<String> ids(int n) {
    List<String> ids = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      ids.add("c" + i);
    }
    return ids;
  }

  /**
   * Any agent's cancel reaches every worker. One naming 90,000 made-up ids (1 MiB) was read id by
   * id and pushed 65,536 keys into the worker's memory of cancels, evicting every real one; a
   * session or reply id of 4 KiB made every key that long. Now a cancel naming more than
   * MAX_CANCEL_CALLS ids, or under an id no call may have, changes nothing: counted, not timed.
   */
  @Test
  void attackCancelBound() {
    CallTable table = new CallTable(new Subjects("toolbus"));
    table.onCancel(cancel("s1", "r1", List.of("real")));
    ToolCall held = new ToolCall("c5", "t", "s1", "r1", null, null, null, 1, null, Instant.now().plusSeconds(60), null, null);
    table.begin(held);
    List<String> over = ids(Codes.MAX_CANCEL_CALLS + 1);
    Map<String, Message> attacks = new LinkedHashMap<>();
    attacks.put("max payload", cancel("s1", "r1", ids(90_000)));
    attacks.put("one id over", cancel("s1", "r1", over));
    attacks.put("session too long", cancel("s".repeat(4000), "r1", List.of("c5")));
    attacks.put("reply id too long", cancel("s1", "r".repeat(4000), List.of("c5")));
    attacks.forEach((name, m) -> {
      table.onCancel(m);
      synchronized (table) {
        assertEquals(1, table.cancelled.size(), name);
        assertTrue(table.cancelled.containsKey(Ids.callKey("s1", "r1", "real")), name);
      }
      assertNull(held.stopped(), name);
    });
    table.onCancel(cancel("s1", "r1", over.subList(0, Codes.MAX_CANCEL_CALLS)));
    synchronized (table) {
      assertEquals(1 + Codes.MAX_CANCEL_CALLS, table.cancelled.size());
    }
    assertEquals(ToolCall.Stop.CANCELLED, held.stopped());
  }
}
