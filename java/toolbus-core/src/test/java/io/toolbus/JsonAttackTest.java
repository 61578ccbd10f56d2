package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Red team, session 31 (docs/security.md): JSON a Go router reads and passes on, but past what the
 * Java SDK's Jackson reads (nesting of 5,000, a number of 5,000 digits, its StreamReadConstraints),
 * from a hostile agent to a Java worker and from a hostile worker to a Java agent. Each is a clear
 * error at once: the worker refuses the exec bad_event without running its tool and serves the
 * next call; the agent's call throws a BusException; nothing waits for a reply that will not come.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class JsonAttackTest {
  static final String DEEP = "[".repeat(5000) + "]".repeat(5000);
  static final String HUGE = "1".repeat(5000);

  /** A hostile agent's batch: the JSON text data sent as it is; the reply's data. */
  static JsonNode rawCall(Connection nc, String session, String data) throws Exception {
    String body = "{\"specversion\":\"1.0\",\"id\":\"" + Ids.next() + "\",\"source\":\"attacker\",\"type\":\"" + Codes.CALL_BATCH
        + "\",\"datacontenttype\":\"application/json\",\"sessionid\":\"" + session + "\",\"data\":" + data + "}";
    Message m = nc.request("toolbus.call." + session, body.getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(20));
    assertNotNull(m, "no reply");
    return Event.decode(m).dataTree();
  }

  @Test
  void unreadableExecRefusedAtOnce() throws Exception {
    Router router = Router.shared();
    String tool = "j_json_" + Ids.next();
    AtomicInteger ran = new AtomicInteger();
    try (Connection nc = router.connect()) {
      Worker w = Worker.builder(nc).id("jjson-" + Ids.next()).heartbeat(Duration.ofSeconds(5)).build();
      w.tool(ToolDef.builder(tool).description("Probe.").readOnly(true).inputSchema(Map.of("type", "object")).build(),
          c -> String.valueOf(ran.incrementAndGet()));
      w.start();
      String session = "jjson-" + Ids.next();
      for (String ctx : new String[] {DEEP, "{\"n\":" + HUGE + "}"}) {
        long t0 = System.nanoTime();
        JsonNode r = rawCall(nc, session, "{\"calls\":[{\"id\":\"c1\",\"name\":\"" + tool + "\",\"input\":{}}],\"context\":" + ctx + "}")
            .path("results").path(0);
        assertEquals("internal", r.path("error").path("code").asText(), r.toString());
        assertTrue(r.path("error").path("message").asText().contains("worker refused the call: bad_event"), r.toString());
        assertTrue(System.nanoTime() - t0 < Duration.ofSeconds(5).toNanos(), "answered only after the worker's heartbeats: " + r);
      }
      assertEquals(0, ran.get(), "the tool ran on what the worker could not read");
      JsonNode ok = rawCall(nc, session, "{\"calls\":[{\"id\":\"c1\",\"name\":\"" + tool + "\",\"input\":{}}],\"context\":{\"n\":1}}");
      assertEquals("success", ok.path("results").path(0).path("state").asText(), ok.toString());
      w.drain(Duration.ofSeconds(5));
    }
  }

  @Test
  void deepResultIsAnErrorOfTheCall() throws Exception {
    Router router = Router.shared();
    String tool = "j_deep_" + Ids.next();
    try (Connection nc = router.connect()) {
      Worker w = Worker.builder(nc).id("jdeep-" + Ids.next()).heartbeat(Duration.ofSeconds(1)).build();
      CountDownLatch hold = new CountDownLatch(1);
      w.tool(ToolDef.builder(tool).description("Raw.").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
        hold.await(); // the hostile responder answers first
        return "sdk";
      });
      w.start();
      // The definition is the SDK worker's, held; a hostile responder answers each exec first, with deep metadata.
      Dispatcher d = nc.createDispatcher(m -> {
        Event x = Event.decode(m);
        String body = "{\"specversion\":\"1.0\",\"id\":\"r" + Ids.next() + "\",\"source\":\"attacker\",\"type\":\"" + Codes.EXEC_RESULT
            + "\",\"sessionid\":\"" + x.sessionid + "\",\"replyid\":\"" + x.replyid + "\",\"toolcallid\":\"" + x.toolcallid
            + "\",\"datacontenttype\":\"application/json\",\"data\":{\"state\":\"success\",\"output\":[{\"type\":\"text\",\"text\":\"x\"}],\"metadata\":"
            + DEEP + "}}";
        nc.publish(m.getReplyTo(), body.getBytes(StandardCharsets.UTF_8));
      });
      d.subscribe("toolbus.exec." + tool);
      nc.flush(Duration.ofSeconds(5));
      ToolbusClient c = ToolbusClient.builder(nc).timeout(Duration.ofSeconds(20)).build();
      String session = "jdeep-" + Ids.next();
      BusException e = assertThrows(BusException.class, () -> c.call(session, Batch.builder().call("c1", tool, Map.of()).build()));
      assertTrue(e.getMessage().contains("nesting depth") || e.getMessage().contains("not JSON"), e.getMessage());
      nc.closeDispatcher(d);
      hold.countDown();
      Reply again = c.call(session, Batch.builder().call("c2", "echo", Map.of("text", "still")).build());
      assertEquals("still", again.results().get(0).output().get(0).text());
      w.drain(Duration.ofSeconds(5));
    }
  }

  /**
   * Any agent may publish cancels on its own P.cancel.<session>, which every Java worker reads,
   * naming ids of its choosing: four cancels of 100,000 ids held 400,000 keys for two minutes in
   * every worker, each cancel scanning them all. Now only valid ids are kept, at most
   * MAX_CANCELLED, the oldest dropped first; a fresh cancel is still remembered.
   */
  @Test
  void cancelFloodBounded() throws Exception {
    Router router = Router.shared();
    String tool = "j_cflood_" + Ids.next();
    try (Connection nc = router.connect()) {
      Worker w = Worker.builder(nc).id("jcf-" + Ids.next()).heartbeat(Duration.ofSeconds(5)).build();
      w.tool(ToolDef.builder(tool).description("Ok.").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> "served");
      w.start();
      java.lang.reflect.Field f = Worker.class.getDeclaredField("calls");
      f.setAccessible(true);
      CallTable table = (CallTable) f.get(w);
      String session = "jcf-" + Ids.next();
      for (int n = 0; n < 4; n++) {
        java.util.List<String> ids = new java.util.ArrayList<>();
        for (int i = 0; i < 100_000; i++) {
          ids.add("f" + n + "x" + i);
        }
        ids.add("not.an id");
        Event e = Event.of(Codes.CALL_CANCEL, "attacker", Map.of("calls", ids));
        e.sessionid = session;
        e.replyid = "flood" + n;
        nc.publish("toolbus.cancel." + session, e.encode());
      }
      Event legit = Event.of(Codes.CALL_CANCEL, "agent", Map.of("calls", java.util.List.of("c1")));
      legit.sessionid = session;
      legit.replyid = "late";
      nc.publish("toolbus.cancel." + session, legit.encode());
      nc.flush(Duration.ofSeconds(10));
      String late = Ids.callKey(session, "late", "c1");
      long end = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      while (true) { // bounded polling: the cancels' delivery
        synchronized (table) {
          if (table.cancelled.containsKey(late)) {
            assertTrue(table.cancelled.size() <= CallTable.MAX_CANCELLED, "remembered " + table.cancelled.size());
            assertTrue(table.cancelled.keySet().stream().noneMatch(k -> k.endsWith("not.an id")));
            break;
          }
        }
        assertTrue(System.nanoTime() < end, "the legitimate cancel was not remembered");
        Thread.sleep(50);
      }
      // Past CANCEL_MEMORY a remembered cancel cuts nothing off, though no cancel came since to drop it.
      synchronized (table) {
        table.cancelled.put(late, new CallTable.Seen(System.nanoTime() - CallTable.CANCEL_MEMORY.toNanos() - Duration.ofSeconds(1).toNanos(), null));
      }
      ToolCall again = new ToolCall("c1", tool, session, "late", null, null, null, 1, null, java.time.Instant.now().plusSeconds(60), w, null);
      assertNull(table.begin(again), "a cancel older than CANCEL_MEMORY cut a request off");
      table.end(again);
      ToolbusClient c = ToolbusClient.builder(nc).timeout(Duration.ofSeconds(20)).build();
      assertEquals("served", c.call(session, Batch.builder().call("c9", tool, Map.of()).build()).results().get(0).output().get(0).text());
      w.drain(Duration.ofSeconds(5));
    }
  }
}
