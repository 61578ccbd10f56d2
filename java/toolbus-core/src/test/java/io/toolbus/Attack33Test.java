package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.impl.Headers;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.Base64;
import java.util.HexFormat;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Session 33's red team: a hostile router against a Java agent, on a prefix no real router serves
 * (docs/security.md, "Attacks, and what stops each").
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class Attack33Test {
  private static final String PREFIX = "hostile33";

  private static Headers structured() {
    return new Headers().put("content-type", "application/cloudevents+json");
  }

  private static byte[] event(String type, String session, String replyId, String data) {
    return ("{\"specversion\":\"1.0\",\"id\":\"" + Ids.next() + "\",\"source\":\"evil\",\"type\":\"" + type
        + "\",\"sessionid\":\"" + session + "\"" + (replyId == null ? "" : ",\"replyid\":\"" + replyId + "\"")
        + ",\"data\":" + data + "}").getBytes(StandardCharsets.UTF_8);
  }

  /** An output.chunk saying the object is 1 TiB is refused at once, and one with bytes past its size:
   * fetch used to ask for windows and keep their bytes until it had the size it was told. */
  @Test
  void fetchRefusesSizesPastTheCeiling() throws Exception {
    Router router = Router.shared();
    try (Connection evil = router.connect(); Connection nc = router.connect()) {
      byte[] data = new byte[1024];
      String digest = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
      String b64 = Base64.getEncoder().encodeToString(data);
      AtomicInteger asked = new AtomicInteger();
      Dispatcher d = evil.createDispatcher(m -> {
        asked.incrementAndGet();
        long size = m.getSubject().endsWith(".s1") ? 1L << 40 : 10;
        evil.publish(m.getReplyTo(), structured(), event(Codes.OUTPUT_CHUNK, "s1", null,
            "{\"size\":" + size + ",\"digest\":\"" + digest + "\",\"offset\":0,\"data\":\"" + b64 + "\"}"));
      });
      d.subscribe(PREFIX + ".outputs.s1");
      d.subscribe(PREFIX + ".outputs.s2");
      evil.flush(Duration.ofSeconds(5));
      ToolbusClient c = ToolbusClient.builder(nc).prefix(PREFIX).build();
      String url = "nats-object://toolbus_outputs/s1.r.c#sha256=" + digest;
      BusException e = assertThrows(BusException.class, () -> c.fetch("s1", url));
      assertTrue(e.getMessage().contains("past the output ceiling"), e.getMessage());
      assertEquals(1, asked.get());
      e = assertThrows(BusException.class, () -> c.fetch("s2", url.replace("/s1.", "/s2.")));
      assertTrue(e.getMessage().contains("bytes past the size"), e.getMessage());
    }
  }

  /** 5,000 events while the reader reads none: a watch holds at most 1024 (the Go client's bound). */
  @Test
  void watchHoldsBoundedEvents() throws Exception {
    Router router = Router.shared();
    try (Connection evil = router.connect(); Connection nc = router.connect()) {
      ToolbusClient c = ToolbusClient.builder(nc).prefix(PREFIX).build();
      try (EventWatch w = c.watch("s1", null)) {
        byte[] body = event(Codes.CALL_PROGRESS, "s1", "r1", "{\"output\":[{\"type\":\"text\",\"text\":\"" + "y".repeat(2048) + "\"}]}");
        for (int i = 0; i < 5000; i++) {
          evil.publish(PREFIX + ".events.s1", structured(), body);
        }
        evil.flush(Duration.ofSeconds(10));
        nc.flush(Duration.ofSeconds(10)); // the messages are at this connection; settle hands them over
        w.settle(Duration.ofSeconds(30));
        int n = 0;
        while (w.next(Duration.ZERO) != null) {
          n++;
        }
        assertEquals(1024, n);
      }
    }
  }
}
