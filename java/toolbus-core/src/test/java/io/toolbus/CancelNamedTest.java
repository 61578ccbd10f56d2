package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Session 41, java41: the Java worker's interrupted result names the cancel that ended the call
 * ({@code "cancel": "<the cancel event's id>"}, docs/protocol.md 3.5 and 5.2, 1.30), as the Go and
 * Python workers' do, against a real router: a running call (core and durable) and a call whose
 * cancel came before its exec (remembered). An interrupted result no cancel caused names none.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class CancelNamedTest {
  static final String SUFFIX = Ids.next().substring(0, 8);
  static final String HOLD = "j_hold_" + SUFFIX, DURABLE = "j_dhold_" + SUFFIX, NEVER = "j_never_" + SUFFIX,
      SELF = "j_self_" + SUFFIX;
  static final CountDownLatch holdStarted = new CountDownLatch(1), durableStarted = new CountDownLatch(1);
  static final AtomicInteger neverRan = new AtomicInteger();
  static Connection nc, watcher;
  static ToolbusClient client;
  static Worker worker;
  /** What the watcher saw: the routers' execs of these tools and every message on an inbox or P.result. */
  static final List<Message> execs = Collections.synchronizedList(new ArrayList<>()),
      answers = Collections.synchronizedList(new ArrayList<>());

  static Handler hold(CountDownLatch started) {
    return c -> {
      started.countDown();
      Thread.sleep(TimeUnit.MINUTES.toMillis(5)); // until the cancel interrupts it
      return "never";
    };
  }

  @BeforeAll
  static void setUp() throws Exception {
    Router router = Router.shared();
    nc = router.connect();
    watcher = router.connect();
    Dispatcher d = watcher.createDispatcher(m -> (m.getSubject().startsWith("toolbus.exec.") ? execs : answers).add(m));
    d.subscribe("_INBOX.>");
    d.subscribe("toolbus.result." + DURABLE);
    d.subscribe("toolbus.exec.*");
    watcher.flush(Duration.ofSeconds(10));
    client = ToolbusClient.builder(watcher).source("java-test").build();
    worker = Worker.builder(nc).id("jn-" + Ids.next()).maxConcurrent(4).build();
    Map<String, Object> any = Map.of("type", "object");
    worker.tool(ToolDef.builder(HOLD).readOnly(true).inputSchema(any).build(), hold(holdStarted));
    worker.tool(ToolDef.builder(DURABLE).readOnly(true).durable(true).inputSchema(any).build(), hold(durableStarted));
    worker.tool(ToolDef.builder(NEVER).readOnly(true).inputSchema(any).build(), c -> {
      neverRan.incrementAndGet();
      return "ran";
    });
    // A tool that ends its own call interrupted and names a cancel: only the worker names one.
    worker.tool(ToolDef.builder(SELF).readOnly(true).inputSchema(any).build(),
        c -> new ExecResult(Codes.STATE_INTERRUPTED, List.of(Block.text("stopped myself")), null, null, "forged"));
    JsonNode ack = worker.start();
    assertEquals(0, ack.path("rejected").size(), ack.toString());
  }

  @AfterAll
  static void tearDown() throws Exception {
    worker.drain(Duration.ofSeconds(5));
    nc.close();
    watcher.close();
  }

  /** Publishes a cancel of calls of reply in session and returns its event id. */
  static String cancel(String session, String reply, String... calls) {
    Event e = Event.of(Codes.CALL_CANCEL, "java-test", Map.of("calls", List.of(calls)));
    e.sessionid = session;
    e.replyid = reply;
    watcher.publish(e.toMessage(new Subjects("toolbus").cancel(session), null));
    return e.id;
  }

  /**
   * The data of the worker's exec result for call c1 of reply, by bounded polling: a durable
   * result names its call; an answer on an inbox is matched to its exec (a compact answer carries
   * only the four required attributes, 5.2).
   */
  static String resultOf(String reply) throws InterruptedException {
    for (long end = System.nanoTime() + Router.BOUND.toNanos(); System.nanoTime() < end; Thread.sleep(20)) {
      List<String> inboxes = new ArrayList<>();
      synchronized (execs) {
        for (Message m : execs) {
          Event e = decoded(m);
          if (e != null && reply.equals(e.replyid) && "c1".equals(e.toolcallid)) {
            inboxes.add(m.getReplyTo());
          }
        }
      }
      synchronized (answers) {
        for (Message m : answers) {
          Event e = decoded(m);
          if (e != null && Codes.EXEC_RESULT.equals(e.type)
              && (inboxes.contains(m.getSubject()) || reply.equals(e.replyid) && "c1".equals(e.toolcallid))) {
            return Json.text(e.dataTree());
          }
        }
      }
    }
    throw new AssertionError("no exec result seen for reply " + reply);
  }

  /** m as an event, or null (an inbox carries other replies too). */
  static Event decoded(Message m) {
    try {
      return Event.decode(m);
    } catch (BusException x) {
      return null;
    }
  }

  static String interrupted(String cancel) {
    return "{\"state\":\"interrupted\",\"output\":[{\"type\":\"text\",\"text\":" + Json.text(Codes.INTERRUPTED_TEXT)
        + "}]" + (cancel == null ? "" : ",\"cancel\":\"" + cancel + "\"") + "}";
  }

  /** Publishes a batch of one call c1 of tool and waits for its batch.done. */
  static List<Result> run(String session, String reply, String tool, Runnable meanwhile) throws Exception {
    try (EventWatch w = client.watch(session)) {
      client.publish(session, reply, Batch.builder().call("c1", tool, Map.of()).build());
      meanwhile.run();
      List<Result> done = w.awaitDone(reply, Router.BOUND);
      assertNotNull(done, "no batch.done for " + reply);
      return done;
    }
  }

  static void await(CountDownLatch l) {
    try {
      assertTrue(l.await(60, TimeUnit.SECONDS), "the call did not start");
    } catch (InterruptedException x) {
      throw new AssertionError(x);
    }
  }

  /** Cancels call c1 of reply once it runs: its result names the cancel. */
  static void namesItsCancel(String reply, String tool, CountDownLatch started) throws Exception {
    String s = Router.session();
    String[] id = new String[1];
    List<Result> done = run(s, reply, tool, () -> {
      await(started);
      id[0] = cancel(s, reply, "c1");
    });
    assertEquals(Codes.STATE_INTERRUPTED, done.get(0).state());
    assertEquals(interrupted(id[0]), resultOf(reply));
  }

  @Test
  void runningCallNamesItsCancel() throws Exception {
    namesItsCancel("rc", HOLD, holdStarted);
  }

  @Test
  void durableCallNamesItsCancel() throws Exception {
    namesItsCancel("rd", DURABLE, durableStarted); // its result on P.result.<tool> (5.8)
  }

  @Test
  void rememberedCancelIsNamed() throws Exception {
    String s = Router.session();
    String id = cancel(s, "rm", "c1"); // before the batch: the router knows no such reply, the worker remembers it
    String key = Ids.callKey(s, "rm", "c1");
    for (long end = System.nanoTime() + Router.BOUND.toNanos(); ; Thread.sleep(20)) { // bounded polling: the cancel's delivery
      synchronized (worker.calls()) {
        if (worker.calls().cancelled.containsKey(key)) {
          break;
        }
      }
      assertTrue(System.nanoTime() < end, "the worker did not remember the cancel");
    }
    List<Result> done = run(s, "rm", NEVER, () -> {});
    assertEquals(Codes.STATE_INTERRUPTED, done.get(0).state(), done.toString());
    assertEquals(interrupted(id), resultOf("rm"));
    assertEquals(0, neverRan.get());
  }

  @Test
  void interruptedByItselfNamesNone() throws Exception {
    String s = Router.session();
    List<Result> done = run(s, "rs", SELF, () -> {});
    assertEquals(Codes.STATE_INTERRUPTED, done.get(0).state());
    String data = resultOf("rs");
    assertFalse(data.contains("\"cancel\""), data);
    assertEquals("{\"state\":\"interrupted\",\"output\":[{\"type\":\"text\",\"text\":\"stopped myself\"}]}", data);
  }

  /** A cancel names at most MAX_CANCEL_CALLS ids (3.5, 1.30): the client refuses more before sending. */
  @Test
  void clientRefusesOversizedCancel() throws Exception {
    String s = Router.session();
    String[] ids = CancelBoundTest.ids(Codes.MAX_CANCEL_CALLS + 1).toArray(String[]::new);
    try (Connection spy = Router.shared().connect()) {
      var sub = spy.subscribe(new Subjects("toolbus").cancel(s));
      spy.flush(Duration.ofSeconds(10));
      BusException x = assertThrows(BusException.class, () -> client.cancel(s, "r1", ids));
      assertEquals(Codes.BAD_EVENT, x.code(), x.getMessage());
      client.cancel(s, "r1", java.util.Arrays.copyOf(ids, Codes.MAX_CANCEL_CALLS)); // the bound itself passes
      Message m = sub.nextMessage(Router.BOUND);
      assertNotNull(m);
      assertEquals(Codes.MAX_CANCEL_CALLS, Event.decode(m).dataTree().path("calls").size(), "the refused cancel was sent");
    }
  }
}
