package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Connection;
import io.nats.client.Message;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Red team, session 32 (docs/security.md): a hostile peer on a Java worker's exec subject. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ExecAttackTest {
  static Event exec(Connection nc, String tool, String input) throws Exception {
    String body = "{\"specversion\":\"1.0\",\"id\":\"" + Ids.next() + "\",\"source\":\"attacker\",\"type\":\"" + Codes.EXEC
        + "\",\"datacontenttype\":\"application/json\",\"sessionid\":\"s1\",\"replyid\":\"r1\",\"toolcallid\":\"c1\""
        + ",\"expirytime\":\"" + Instant.now().plusSeconds(30) + "\",\"data\":{\"call\":{\"id\":\"c1\",\"name\":\"" + tool
        + "\",\"input\":" + input + "},\"attempt\":1}}";
    Message m = nc.request("toolbus.exec." + tool, body.getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(20));
    assertNotNull(m, "no reply");
    return Event.decode(m);
  }

  /** An input that is JSON but no object (5.1) is refused bad_event; the raw tool never sees it. */
  @Test
  void execInputNotAnObjectRefused() throws Exception {
    Router router = Router.shared();
    String tool = "j_in_" + Ids.next();
    AtomicInteger ran = new AtomicInteger();
    try (Connection nc = router.connect()) {
      Worker w = Worker.builder(nc).id("jin-" + Ids.next()).build();
      w.tool(ToolDef.builder(tool).description("Raw.").inputSchema(Map.of("type", "object")).build(),
          c -> ran.incrementAndGet() + ":" + c.input());
      w.start();
      for (String in : new String[] {"[1,2]", "\"x\"", "5", "true"}) {
        Event e = exec(nc, tool, in);
        assertEquals(Codes.ERROR, e.type, in);
        assertEquals("bad_event", e.dataTree().path("code").asText(), in);
        assertTrue(e.dataTree().path("message").asText().contains("call.input must be an object"), e.dataTree().toString());
      }
      assertEquals(0, ran.get());
      assertEquals("1:{}", exec(nc, tool, "null").dataTree().path("output").path(0).path("text").asText());
      assertEquals("2:{\"a\":1}", exec(nc, tool, "{\"a\":1}").dataTree().path("output").path(0).path("text").asText());
      w.drain(Duration.ofSeconds(5));
    }
  }

  /**
   * A responder on P.call.<session> answering before the router (3.2: each call once, finished or
   * parked): a result for a call never sent, one twice, or a call left out is a BusException; a
   * reply naming each call once is taken. Prefix "forged": no router answers there.
   */
  @Test
  void forgedReplyIdsRefused() throws Exception {
    Router router = Router.shared();
    String ok = "{\"id\":\"c1\",\"name\":\"t\",\"state\":\"success\",\"output\":[]}";
    String[] forged = {ok.replace("c1", "other"), ok + "," + ok, "", ok + "," + ok.replace("c1", "c2"), ok};
    for (int i = 0; i < forged.length; i++) {
      String results = forged[i];
      try (Connection nc = router.connect(); Connection hostile = router.connect()) {
        String session = "jforged-" + Ids.next();
        Message reply = Event.of(Codes.CALL_REPLY, "attacker", Json.MAPPER.readTree("{\"results\":[" + results + "],\"parked\":[]}"))
            .toMessage("x", null);
        io.nats.client.Dispatcher d = hostile.createDispatcher(m -> hostile.publish(m.getReplyTo(), reply.getHeaders(), reply.getData()));
        d.subscribe("forged.call." + session);
        hostile.flush(Duration.ofSeconds(5));
        ToolbusClient c = ToolbusClient.builder(nc).prefix("forged").build();
        Batch b = Batch.builder().call("c1", "t", Map.of()).build();
        if (i == forged.length - 1) {
          assertEquals("c1", c.call(session, b).results().get(0).id());
          continue;
        }
        BusException e = org.junit.jupiter.api.Assertions.assertThrows(BusException.class, () -> c.call(session, b));
        assertTrue(e.getMessage().contains("each call of the batch once"), e.getMessage());
      }
    }
  }
}
