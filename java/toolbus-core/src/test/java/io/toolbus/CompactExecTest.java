package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import io.nats.client.Subscription;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Protocol 1.16's compact exec (docs/protocol.md 5.1, 5.2, 7.1) against a real router: the Java
 * worker declares compact_exec, gets the compact exec alone or beside a Go worker and answers it
 * with the four headers CloudEvents requires; a compact exec with a bad attribute is refused as
 * section 1 says; compactExec(false) keeps the 1.15 binary form.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class CompactExecTest {
  static final Set<String> REQUIRED = Set.of("ce-specversion", "ce-id", "ce-source", "ce-type");
  static final Set<String> COMPACT_EXEC = Set.of("ce-specversion", "ce-id", "ce-source", "ce-type",
      "ce-sessionid", "ce-replyid", "ce-toolcallid", "ce-expirytime");

  /** Watches a tool's execs and the answers to them on their reply inboxes. */
  static final class Wire {
    final BlockingQueue<Message> execs = new LinkedBlockingQueue<>();
    final Map<String, Message> answers = new ConcurrentHashMap<>();

    Wire(Connection nc, String tool) throws Exception {
      Dispatcher d = nc.createDispatcher();
      d.subscribe("toolbus.exec." + tool, execs::add);
      d.subscribe("_INBOX.>", m -> answers.put(m.getSubject(), m));
      nc.flush(Duration.ofSeconds(10));
    }

    Message exec() throws InterruptedException {
      Message m = execs.poll(30, TimeUnit.SECONDS);
      assertNotNull(m, "no exec seen");
      return m;
    }

    /** The answer to an exec, by bounded polling (the watcher may see it after the agent's reply). */
    Message answer(Message exec) throws InterruptedException {
      for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10); System.nanoTime() < end; Thread.sleep(20)) {
        Message a = answers.get(exec.getReplyTo());
        if (a != null) {
          return a;
        }
      }
      throw new AssertionError("no answer seen on " + exec.getReplyTo());
    }
  }

  static Set<String> keys(Message m) {
    return new TreeSet<>(m.getHeaders().keySet());
  }

  static Worker counter(Connection nc, String tool, boolean compact) {
    Worker w = Worker.builder(nc).id("jc-" + Ids.next()).heartbeat(Duration.ofSeconds(1)).compactExec(compact).build();
    w.tool(ToolDef.builder(tool).description("Count words.").readOnly(true).inputSchema(Map.of("type", "object")).build(),
        c -> String.valueOf(c.input().path("text").asText().split(" ").length));
    return w;
  }

  @Test
  void compactExecAnsweredWithFourHeaders() throws Exception {
    Router router = Router.shared();
    String tool = "j_compact_" + Ids.next();
    try (Connection nc = router.connect(); Connection watcher = router.connect()) {
      Subscription regs = watcher.subscribe("toolbus.register." + tool);
      Wire wire = new Wire(watcher, tool);
      Worker w = counter(nc, tool, true);
      w.start();
      JsonNode reg = Event.decode(regs.nextMessage(Duration.ofSeconds(30))).dataTree();
      assertTrue(reg.path("binary_exec").asBoolean() && reg.path("compact_exec").asBoolean(), reg.toString());
      Reply r = ToolbusClient.builder(watcher).build().call(Router.session(), Batch.builder().call("c1", tool, Map.of("text", "a b c")).build());
      assertEquals("3", r.result("c1").text(), r.toString());
      Message x = wire.exec();
      assertEquals(new TreeSet<>(COMPACT_EXEC), keys(x));
      Message a = wire.answer(x);
      assertEquals(new TreeSet<>(REQUIRED), keys(a));
      assertEquals(Codes.EXEC_RESULT, a.getHeaders().getFirst("ce-type"));
      assertEquals("toolbus/worker/" + w.id(), a.getHeaders().getFirst("ce-source"));
      assertEquals("{\"state\":\"success\",\"output\":[{\"type\":\"text\",\"text\":\"3\"}]}", new String(a.getData()));
      w.drain(Duration.ofSeconds(5));
    }
  }

  @Test
  void compactOffAnswersBinary() throws Exception {
    Router router = Router.shared();
    String tool = "j_nocompact_" + Ids.next();
    try (Connection nc = router.connect(); Connection watcher = router.connect()) {
      Subscription regs = watcher.subscribe("toolbus.register." + tool);
      Wire wire = new Wire(watcher, tool);
      Worker w = counter(nc, tool, false);
      w.start();
      JsonNode reg = Event.decode(regs.nextMessage(Duration.ofSeconds(30))).dataTree();
      assertTrue(reg.path("binary_exec").asBoolean() && !reg.has("compact_exec"), reg.toString());
      Reply r = ToolbusClient.builder(watcher).build().call(Router.session(), Batch.builder().call("c1", tool, Map.of("text", "a b")).build());
      assertEquals("2", r.result("c1").text(), r.toString());
      Message x = wire.exec();
      assertEquals(Codes.CONTENT_TYPE_JSON, x.getHeaders().getFirst("content-type"));
      assertTrue(x.getHeaders().containsKey("ce-time"), keys(x).toString());
      Message a = wire.answer(x);
      assertEquals(Codes.CONTENT_TYPE_JSON, a.getHeaders().getFirst("content-type"));
      assertEquals("c1", a.getHeaders().getFirst("ce-toolcallid"));
      w.drain(Duration.ofSeconds(5));
    }
  }

  /** A Go worker and a Java worker serve one tool: both beats say compact, and both get compact execs. */
  @Test
  void mixedFleetWithGoWorkerGetsCompact() throws Exception {
    Router router = Router.shared();
    String goId = "jgo" + Ids.next();
    try (Connection nc = router.connect(); Connection watcher = router.connect()) {
      Subscription regs = watcher.subscribe("toolbus.register.word_count");
      watcher.flush(Duration.ofSeconds(10));
      Process p = new ProcessBuilder(Router.binary("toolworker").toString(), "--nats", router.url(), "--id", goId)
          .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
      Worker w = null;
      try {
        JsonNode goDef = null;
        for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60); goDef == null && System.nanoTime() < end; ) {
          Message m = regs.nextMessage(Duration.ofSeconds(1));
          JsonNode d = m == null ? null : Event.decode(m).dataTree();
          if (d != null && goId.equals(d.path("worker").asText()) && d.path("tools").size() == 1) {
            goDef = d.path("tools").get(0);
          }
        }
        assertNotNull(goDef, "the Go worker never registered word_count");
        w = Worker.builder(nc).id("jmixed" + Ids.next()).heartbeat(Duration.ofSeconds(1)).build();
        w.tool(Json.decode(goDef, ToolDef.class, Codes.BAD_REQUEST, "word_count"),
            c -> "{\"words\":" + c.input().path("text").asText().split(" ").length + "}");
        JsonNode ack = w.start();
        assertEquals("word_count", ack.path("accepted").get(0).asText(), ack.toString());
        var kv = nc.keyValue("toolbus_workers");
        for (String id : new String[] {goId, w.id()}) {
          JsonNode beat = Json.parse(kv.get("word_count." + id).getValue(), Codes.BAD_EVENT, "beat");
          assertTrue(beat.path("binary").asBoolean() && beat.path("compact").asBoolean(), id + ": " + beat);
        }
        Wire wire = new Wire(watcher, "word_count");
        ToolbusClient client = ToolbusClient.builder(watcher).build();
        Set<String> sources = new TreeSet<>();
        for (int i = 0; i < 200 && sources.size() < 2; i++) {
          Reply r = client.call(Router.session(), Batch.builder().call("c1", "word_count", Map.of("text", "x y")).build());
          assertEquals("{\"words\":2}", r.result("c1").text(), r.toString());
          Message x = wire.exec();
          assertEquals(new TreeSet<>(COMPACT_EXEC), keys(x));
          Message a = wire.answer(x);
          assertEquals(new TreeSet<>(REQUIRED), keys(a));
          sources.add(a.getHeaders().getFirst("ce-source"));
        }
        assertEquals(new TreeSet<>(Set.of("toolbus/worker/" + goId, "toolbus/worker/" + w.id())), sources);
      } finally {
        p.destroy();
        p.waitFor(10, TimeUnit.SECONDS);
        if (w != null) {
          w.drain(Duration.ofSeconds(5));
        }
      }
    }
  }

  /** A compact exec with a bad id, a non-UTF-8 or a badly escaped header gets bad_event, as in binary mode (1). */
  @Test
  void badCompactExecRefused() throws Exception {
    Router router = Router.shared();
    String tool = "j_badcompact_" + Ids.next();
    try (Connection nc = router.connect(); Connection agent = router.connect()) {
      Worker w = counter(nc, tool, true);
      w.start();
      Event e = Event.of(Codes.EXEC, "toolbus/router/test", Map.of("call", Map.of("id", "c1", "name", tool, "input", Map.of("text", "a b c")), "attempt", 1));
      String[][] good = {{"ce-specversion", "1.0"}, {"ce-id", "x1"}, {"ce-source", "toolbus/router/test"}, {"ce-type", Codes.EXEC},
        {"ce-sessionid", "s1"}, {"ce-replyid", "r1"}, {"ce-toolcallid", "c1"}, {"ce-expirytime", Instant.now().plusSeconds(30).toString()}};
      Message ok = agent.request(compact(tool, good, e.data(), null, null), Duration.ofSeconds(30));
      assertEquals(new TreeSet<>(REQUIRED), keys(ok));
      assertTrue(new String(ok.getData()).contains("\"text\":\"3\""), new String(ok.getData()));
      String[][] bad = {{"ce-sessionid", "a.b", "sessionid \"a.b\" must match"}, {"ce-toolcallid", "%FF", "header ce-toolcallid is not UTF-8"},
        {"ce-replyid", "%zz", "header ce-replyid: invalid URL escape"}};
      for (String[] b : bad) {
        Event refused = Event.decode(agent.request(compact(tool, good, e.data(), b[0], b[1]), Duration.ofSeconds(30)));
        assertEquals(Codes.ERROR, refused.type);
        assertEquals("bad_event", refused.dataTree().path("code").asText());
        assertTrue(refused.dataTree().path("message").asText().contains(b[2]), refused.dataTree().toString());
      }
      assertFalse(ok.getHeaders().containsKey("content-type"));
      w.drain(Duration.ofSeconds(5));
    }
  }

  /** A compact exec of the headers given, with header key set to value when key is not null. */
  static Message compact(String tool, String[][] headers, byte[] body, String key, String value) {
    Headers h = new Headers();
    for (String[] kv : headers) {
      h.put(kv[0], kv[0].equals(key) ? value : kv[1]);
    }
    return NatsMessage.builder().subject("toolbus.exec." + tool).headers(h).data(body).build();
  }
}
