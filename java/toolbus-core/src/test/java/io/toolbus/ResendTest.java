package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import io.nats.client.Subscription;
import io.nats.client.impl.Headers;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Re-sending a batch after silence (docs/protocol.md 3.2.1, 1.25) against a fake router: this test
 * serves P.call.<session> under a prefix no router serves, on a connection of its own, and sees
 * every copy the client publishes.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ResendTest {
  private static final String PREFIX = "fake35";
  private static final String MARK = "{\"mark\":true}";

  private Connection nc;
  private Connection fake;
  private final List<Message> copies = new CopyOnWriteArrayList<>();
  private final CountDownLatch marked = new CountDownLatch(1);
  private final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
  private String session;

  @BeforeEach
  void setUp() throws Exception {
    Router router = Router.shared();
    nc = router.connect();
    fake = router.connect();
    session = "jresend-" + Ids.next();
  }

  @AfterEach
  void tearDown() throws Exception {
    timer.shutdownNow();
    fake.close();
    nc.close();
  }

  /** Serves P.call.<session>: each copy is kept, then given (with its number, from 1) to onCopy. */
  private void serve(BiConsumer<Integer, Message> onCopy) throws Exception {
    Dispatcher d = fake.createDispatcher(m -> {
      if (new String(m.getData(), StandardCharsets.UTF_8).equals(MARK)) {
        marked.countDown();
        return;
      }
      copies.add(m);
      onCopy.accept(copies.size(), m);
    });
    d.subscribe(PREFIX + ".call." + session);
    fake.flush(Duration.ofSeconds(5));
  }

  /** Waits until the fake router has read every copy the client published before now. */
  private void barrier() throws Exception {
    nc.publish(PREFIX + ".call." + session, MARK.getBytes(StandardCharsets.UTF_8));
    assertTrue(marked.await(10, TimeUnit.SECONDS), "the fake router did not see the mark");
  }

  private ToolbusClient client(Resend rs, Duration timeout) {
    return ToolbusClient.builder(nc).prefix(PREFIX).resend(rs).timeout(timeout).build();
  }

  private static Batch batch() {
    return Batch.builder().call("c1", "t", Map.of("q", 1)).build();
  }

  private void reply(Message copy) {
    Event e = Event.of(Codes.CALL_REPLY, "fake", Map.of("results",
        List.of(Map.of("id", "c1", "name", "t", "state", "success", "output", List.of())), "parked", List.of()));
    fake.publish(e.toMessage(copy.getReplyTo(), null));
  }

  private void notice(Message copy, String type, String replyId) {
    notice(copy, type, replyId, ".running");
  }

  private void notice(Message copy, String type, String replyId, String suffix) {
    Event e = Event.of(type, "fake", Map.of("running", List.of("c1")));
    e.sessionid = session;
    e.replyid = replyId;
    fake.publish(e.toMessage(copy.getReplyTo() + suffix, null));
  }

  private static String header(Message m) {
    Headers h = m.getHeaders();
    return h == null ? "" : h.entrySet().toString();
  }

  private void assertSameCopies(int n) {
    assertEquals(n, copies.size());
    Message first = copies.get(0);
    for (Message m : copies) {
      assertArrayEquals(first.getData(), m.getData());
      assertEquals(header(first), header(m));
      assertEquals(first.getReplyTo(), m.getReplyTo());
    }
  }

  /** Calls with rs through the fake router: the reply is its, and the router saw copies identical copies. */
  private void answered(Resend rs, int copies) throws Exception {
    Reply r = client(rs, Duration.ofSeconds(30)).call(session, batch());
    assertEquals("c1", r.results().get(0).id());
    barrier();
    assertSameCopies(copies);
  }

  @Test
  void firstCopyLostIsResentAndAnswered() throws Exception {
    serve((n, m) -> {
      if (n == 2) {
        reply(m);
      }
    });
    long t0 = System.nanoTime();
    answered(new Resend(Duration.ofMillis(300), Duration.ofSeconds(5), 3), 2);
    assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(300), "re-sent before the first window");
  }

  @Test
  void noticesHoldResendsOff() throws Exception {
    serve((n, m) -> {
      if (n == 1) {
        timer.scheduleAtFixedRate(() -> notice(m, Codes.CALL_RUNNING, Event.decode(m).id), 0, 100, TimeUnit.MILLISECONDS);
        timer.schedule(() -> reply(m), 3500, TimeUnit.MILLISECONDS); // past several windows
      }
    });
    answered(new Resend(Duration.ofSeconds(1), Duration.ofSeconds(1), 3), 1);
  }

  @Test
  void atMostMaxResendsThenTheTimeout() throws Exception {
    serve((n, m) -> {});
    ToolbusClient c = client(new Resend(Duration.ofMillis(200), Duration.ofSeconds(5), 2), Duration.ofMillis(1500));
    BusException e = assertThrows(BusException.class, () -> c.call(session, batch()));
    assertEquals(Codes.TIMEOUT, e.code());
    barrier();
    assertSameCopies(3);
  }

  @Test
  void offSendsOneCopy() throws Exception {
    serve((n, m) -> {});
    BusException e = assertThrows(BusException.class, () -> client(Resend.off(), Duration.ofSeconds(1)).call(session, batch()));
    assertEquals(Codes.TIMEOUT, e.code());
    barrier();
    assertSameCopies(1);
  }

  /** Notices of another batch, of another type, or not CloudEvents neither count nor fail the call. */
  @Test
  void otherNoticesDoNotCount() throws Exception {
    serve((n, m) -> {
      if (n == 1) {
        timer.scheduleAtFixedRate(() -> {
          notice(m, Codes.CALL_RUNNING, "another-batch");
          notice(m, Codes.CALL_PROGRESS, Event.decode(m).id);
          fake.publish(m.getReplyTo() + ".running", "junk".getBytes(StandardCharsets.UTF_8));
          notice(m, Codes.CALL_RUNNING, Event.decode(m).id, ".other"); // not on .running: ignored
        }, 0, 50, TimeUnit.MILLISECONDS);
      } else {
        reply(m);
      }
    });
    answered(new Resend(Duration.ofMillis(400), Duration.ofSeconds(5), 3), 2);
  }

  /** 5,000 notices ahead of the reply: they are read on a bounded subscription, the reply on its own. */
  @Test
  void noticeFloodNeverDropsTheReply() throws Exception {
    serve((n, m) -> {
      String id = Event.decode(m).id;
      for (int i = 0; i < 5000; i++) {
        notice(m, Codes.CALL_RUNNING, id);
      }
      reply(m);
    });
    answered(new Resend(Duration.ofSeconds(5), Duration.ofSeconds(5), 3), 1);
  }

  @Test
  void nothingResentAfterTheReply() throws Exception {
    CountDownLatch second = new CountDownLatch(1);
    serve((n, m) -> {
      if (n == 1) {
        reply(m);
      } else {
        second.countDown();
      }
    });
    client(new Resend(Duration.ofMillis(100), Duration.ofMillis(100), 3), Duration.ofSeconds(30)).call(session, batch());
    assertFalse(second.await(600, TimeUnit.MILLISECONDS), "a copy was re-sent after the reply"); // six windows
    barrier();
    assertSameCopies(1);
  }

  @Test
  void noRouterIsUnavailableAtOnce() {
    ToolbusClient c = ToolbusClient.builder(nc).prefix("nobody35").build();
    BusException e = assertThrows(BusException.class, () -> c.call(session, batch()));
    assertEquals(Codes.UNAVAILABLE, e.code());
  }

  /**
   * Against the real router: a read-only tool that runs 4 s is not run again by a client whose first
   * window is 3 s, since the router's notices hold its re-sends off; the test sees them on the inbox.
   */
  @Test
  void realRouterNoticesPreventAReRun() throws Exception {
    Router router = Router.shared();
    java.util.concurrent.atomic.AtomicInteger runs = new java.util.concurrent.atomic.AtomicInteger();
    try (Connection watcher = router.connect()) {
      Subscription notices = watcher.subscribe("_INBOX.*.*.running");
      watcher.flush(Duration.ofSeconds(5));
      Worker w = Worker.builder(nc).id("jresend-" + Ids.next()).build();
      w.tool(ToolDef.builder("j_four_seconds").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
        runs.incrementAndGet();
        Thread.sleep(4000); // the tool's own work: it runs 4 s
        return "done";
      });
      w.start();
      try {
        ToolbusClient c = ToolbusClient.builder(nc).resend(new Resend(Duration.ofSeconds(3), Duration.ofSeconds(15), 3)).build();
        Reply r = c.call(Router.session(), Batch.builder().call("c1", "j_four_seconds", Map.of()).build());
        assertEquals("done", r.result("c1").text());
        assertEquals(1, runs.get());
        assertTrue(notices.nextMessage(Duration.ofSeconds(5)) != null, "no running notice seen");
      } finally {
        w.close();
      }
    }
  }
}
