package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import io.nats.client.Message;
import io.nats.client.Subscription;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Protocol 1.12 (docs/protocol.md 7.1): a worker registers, beats and leaves each tool on its own
 * subject, {@code P.register.<tool>}, and each group on {@code P.register.group.<group>}; nothing
 * goes to the shared {@code P.register} of 1.11. Watched on a real router, which acknowledges them
 * and takes the leave.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class RegisterSubjectsTest {
  @Test
  void registersBeatsAndLeavesPerTool() throws Exception {
    Router router = Router.shared();
    String a = "j_reg_a_" + Ids.next();
    String b = "j_reg_b_" + Ids.next();
    String group = "j_reg_g_" + Ids.next();
    String wid = "j_reg_w_" + Ids.next();
    try (Connection nc = router.connect(); Connection watcher = router.connect()) {
      Subscription shared = watcher.subscribe("toolbus.register");
      Subscription regs = watcher.subscribe("toolbus.register.>");
      watcher.flush(Duration.ofSeconds(10));
      Worker w = Worker.builder(nc).id(wid).heartbeat(Duration.ofMillis(200)).group(Group.meta(group, "G.")).build();
      w.tool(ToolDef.builder(a).readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> "a");
      w.tool(ToolDef.builder(b).readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> "b");
      JsonNode ack = w.start();
      TreeSet<String> accepted = new TreeSet<>();
      ack.path("accepted").forEach(n -> accepted.add(n.asText()));
      assertEquals(new TreeSet<>(List.of(a, b)), accepted, ack.toString());
      assertEquals(0, ack.path("rejected").size(), ack.toString());

      List<Message> seen = new ArrayList<>();
      int beatsA = 0;
      int beatsB = 0;
      boolean groupSeen = false;
      for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30); (beatsA < 3 || beatsB < 3 || !groupSeen) && System.nanoTime() < end; ) {
        Message m = regs.nextMessage(Duration.ofSeconds(1));
        if (m == null || !wid.equals(Event.decode(m).dataTree().path("worker").asText())) {
          continue; // the router's built-in tools beat too
        }
        seen.add(m);
        beatsA += m.getSubject().equals("toolbus.register." + a) ? 1 : 0;
        beatsB += m.getSubject().equals("toolbus.register." + b) ? 1 : 0;
        groupSeen |= m.getSubject().equals("toolbus.register.group." + group);
      }
      assertTrue(beatsA >= 3 && beatsB >= 3 && groupSeen, "beats " + beatsA + ", " + beatsB + ", group " + groupSeen);
      for (Message m : seen) {
        JsonNode d = Event.decode(m).dataTree();
        if (m.getSubject().startsWith("toolbus.register.group.")) {
          assertEquals(group, d.path("groups").get(0).path("name").asText(), d.toString());
          assertTrue(d.path("tools").isMissingNode(), d.toString());
          continue;
        }
        String tool = m.getSubject().substring("toolbus.register.".length());
        assertEquals(1, d.path("tools").size(), d.toString());
        assertEquals(tool, d.path("tools").get(0).path("name").asText(), d.toString());
        assertTrue(d.path("inflight").has(tool) && d.path("inflight").size() == 1, d.toString());
        assertTrue(d.path("groups").isMissingNode(), d.toString());
      }

      ToolbusClient client = ToolbusClient.builder(watcher).build();
      String s = Router.session();
      assertEquals("a", client.call(s, Batch.builder().call("c1", a, Map.of()).build()).results().get(0).text());

      assertEquals(0, w.drain(Duration.ofSeconds(10)));
      TreeSet<String> leaves = new TreeSet<>();
      for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30); leaves.size() < 2 && System.nanoTime() < end; ) {
        Message m = regs.nextMessage(Duration.ofSeconds(1));
        if (m != null && wid.equals(Event.decode(m).dataTree().path("worker").asText()) && Event.decode(m).dataTree().path("leaving").asBoolean()) {
          assertTrue(Event.decode(m).dataTree().path("tools").isMissingNode());
          leaves.add(m.getSubject());
        }
      }
      assertEquals(new TreeSet<>(List.of("toolbus.register." + a, "toolbus.register." + b)), leaves);
      for (Message m = shared.nextMessage(Duration.ofMillis(1)); m != null; m = shared.nextMessage(Duration.ofMillis(1))) {
        assertTrue(!wid.equals(Event.decode(m).dataTree().path("worker").asText()), "a registration on the shared subject of 1.11");
      }
      // The router took the leaves: the tool has no live worker.
      Result after = client.call(s, Batch.builder().call("c2", a, Map.of()).build()).results().get(0);
      assertEquals("unavailable", after.code(), after.toString());
    }
  }
}
