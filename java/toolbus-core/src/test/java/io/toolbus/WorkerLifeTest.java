package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Connection;
import io.nats.client.Subscription;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A worker's life: heartbeats that list the calls it holds, and a drain that lets them finish. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class WorkerLifeTest {
  @Test
  void heartbeatsListInflightAndDrainFinishesThem() throws Exception {
    Router router = Router.shared();
    String tool = "j_life_" + Ids.next();
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    try (Connection nc = router.connect(); Connection watcher = router.connect()) {
      Worker w = Worker.builder(nc).heartbeat(Duration.ofMillis(100)).build();
      w.tool(ToolDef.builder(tool).readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
        started.countDown();
        release.await(60, TimeUnit.SECONDS);
        return "finished";
      });
      Subscription beats = watcher.subscribe("toolbus.register." + tool); // its own subject (7.1, 1.12)
      watcher.flush(Duration.ofSeconds(10));
      w.start();
      ToolbusClient client = ToolbusClient.builder(watcher).build();
      String s = Router.session();
      CompletableFuture<Reply> reply = CompletableFuture.supplyAsync(() -> client.call(s, "r1", Batch.builder().call("c1", tool, Map.of()).build(), null));
      assertTrue(started.await(60, TimeUnit.SECONDS));
      String key = Ids.callKey(s, "r1", "c1");
      boolean listed = false;
      for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30); !listed && System.nanoTime() < end; ) {
        var m = beats.nextMessage(Duration.ofSeconds(1));
        if (m != null && m.getData() != null) {
          Event e = Event.decode(m);
          listed = e.dataTree().path("inflight").path(tool).toString().contains(key);
        }
      }
      assertTrue(listed, "no heartbeat listed " + key);
      CompletableFuture<Integer> drained = CompletableFuture.supplyAsync(() -> {
        try {
          return w.drain(Duration.ofSeconds(30));
        } catch (InterruptedException e) {
          throw new IllegalStateException(e);
        }
      });
      release.countDown();
      assertEquals(0, drained.get(60, TimeUnit.SECONDS), "no call should be cut off");
      Reply r = reply.get(60, TimeUnit.SECONDS);
      assertEquals("finished", r.results().get(0).text());
      Result after = client.call(s, Batch.builder().call("c2", tool, Map.of()).build()).results().get(0);
      assertNotNull(after.code());
      assertEquals("unavailable", after.code(), after.toString());
    }
  }
}
