package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.IntFunction;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Sender's input digest lookup reads every page of parked.list (docs/protocol.md 9, 1.18),
 * against a real router; and a hostile router's pages that do not advance, or never end, end the
 * lookup with an error (docs/security.md).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ParkedPagesTest {
  static Router router;
  static Connection nc;
  static Worker worker;
  static final String TOOL = "jp_pick_" + Ids.next();

  @BeforeAll
  static void setUp() throws Exception {
    router = Router.shared();
    nc = router.connect();
    worker = Worker.builder(nc).id("jpw-" + Ids.next()).build();
    worker.tool(ToolDef.builder(TOOL).description("Pick a file.").external(true).permission("allow")
        .inputSchema(Map.of("type", "object")).build(), c -> "unused");
    assertEquals(0, worker.start().path("rejected").size());
  }

  @AfterAll
  static void tearDown() throws Exception {
    worker.drain(Duration.ofSeconds(5));
    nc.close();
  }

  static Sender sender(String prefix) {
    ToolbusClient c = ToolbusClient.builder(nc).prefix(prefix).source("java-test").build();
    return new Sender(c, nc, new Requester(nc), "java-test", new ConcurrentHashMap<>());
  }

  /**
   * Counts the parked.list requests of session sent on prefix (a plain subscription sees them all):
   * a permit each, released on the dispatcher's thread, so a test waits for them, bounded.
   */
  static Semaphore countRequests(Dispatcher d, String prefix, String session) {
    Semaphore n = new Semaphore(0);
    d.subscribe(prefix + ".admin.parked.list", m -> {
      if (session.equals(Event.decode(m).sessionid)) {
        n.release();
      }
    });
    return n;
  }

  @Test
  void digestOfACallOnTheThirdPage() throws Exception {
    String s = Router.session();
    ToolbusClient client = ToolbusClient.builder(nc).source("java-test").build();
    Batch.Builder b = Batch.builder();
    for (int i = 1; i <= 5; i++) {
      b.call("c" + i, TOOL, Map.of("n", i));
    }
    assertEquals(5, client.call(s, "rp", b.build(), null).parked().size());
    JsonNode all = client.admin("parked.list", s, Map.of());
    List<String> digests = new ArrayList<>();
    all.path("parked").forEach(p -> digests.add(p.path("id").asText() + "=" + p.path("input_digest").asText()));
    assertEquals(5, digests.size(), all.toString());

    Dispatcher d = nc.createDispatcher();
    try {
      Semaphore requests = countRequests(d, "toolbus", s);
      nc.flush(Duration.ofSeconds(10));
      Sender tx = sender("toolbus");
      String c5 = tx.parkedDigest(s, "rp", "c5", 2);
      assertNotNull(c5);
      assertTrue(digests.contains("c5=" + c5), digests + " " + c5);
      BusException none = assertThrows(BusException.class, () -> tx.parkedDigest(s, "rp", "c9", 2));
      assertEquals(Codes.NOT_PARKED, none.code());
      // The dispatcher counts on its own thread, maybe after the walk returned: wait for six.
      assertTrue(requests.tryAcquire(6, 10, TimeUnit.SECONDS), "three pages of two calls, twice");
      nc.flush(Duration.ofSeconds(10));
      assertEquals(0, requests.availablePermits(), "no request past the six");
      // The public path (one page) answers with the same digest the walk found.
      assertEquals(c5, tx.parkedDigest(s, "rp", "c5"));
    } finally {
      nc.closeDispatcher(d);
      client.cancel(s, "rp");
    }
  }

  /** A hostile router on prefix: the page of the n-th request (from 1) is page.apply(n). */
  static AtomicInteger hostile(Dispatcher d, String prefix, IntFunction<Map<String, Object>> page) {
    AtomicInteger n = new AtomicInteger();
    d.subscribe(prefix + ".admin.parked.list", m -> {
      Event re = Event.of(Codes.ADMIN_REPLY, "hostile", page.apply(n.incrementAndGet()));
      nc.publish(re.toMessage(m.getReplyTo(), null));
    });
    return n;
  }

  static Map<String, Object> call(String id) {
    return Map.of("session", "s", "reply_id", "r", "id", id, "input_digest", "sha256:" + id);
  }

  @Test
  void hostilePagesEndTheWalk() throws Exception {
    Dispatcher d = nc.createDispatcher();
    try {
      String stuck = "hostile" + Ids.next();
      AtomicInteger stuckN = hostile(d, stuck, i -> Map.of("parked", List.of(call("x" + i)), "next", "cursor-1"));
      String empty = "hostile" + Ids.next();
      AtomicInteger emptyN = hostile(d, empty, i -> Map.of("parked", List.of(), "next", "cursor-" + i));
      String endless = "hostile" + Ids.next();
      AtomicInteger endlessN = hostile(d, endless, i -> Map.of("parked", List.of(call("x" + i)), "next", "cursor-" + i));
      nc.flush(Duration.ofSeconds(10));

      BusException e = assertThrows(BusException.class, () -> sender(stuck).parkedDigest("s", "r", "c1"));
      assertTrue(e.getMessage().contains("did not advance"), e.getMessage());
      assertEquals(2, stuckN.get());
      e = assertThrows(BusException.class, () -> sender(empty).parkedDigest("s", "r", "c1"));
      assertTrue(e.getMessage().contains("did not advance"), e.getMessage());
      assertEquals(1, emptyN.get());
      // A call on its third page is found; one on no page ends the walk at MAX_PAGES.
      assertEquals("sha256:x3", sender(endless).parkedDigest("s", "r", "x3"));
      assertEquals(3, endlessN.get());
      e = assertThrows(BusException.class, () -> sender(endless).parkedDigest("s", "r", "c1"));
      assertEquals(Codes.LIMIT_EXCEEDED, e.code(), e.getMessage());
      assertEquals(3 + Sender.MAX_PAGES, endlessN.get());
    } finally {
      nc.closeDispatcher(d);
    }
  }
}
