package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import io.nats.client.Message;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The Java agent and worker sides against a real router with embedded NATS. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class BusTest {
  static Router router;
  static Connection nc;
  static ToolbusClient client;
  static Worker worker;
  static final CountDownLatch slowStarted = new CountDownLatch(1);
  static final AtomicInteger running = new AtomicInteger();
  static final AtomicInteger maxRunning = new AtomicInteger();

  record AddIn(@Schemas.Description("first") double a, @Schemas.Description("second") double b) {}

  record EchoIn(String text) {}

  @BeforeAll
  static void setUp() throws Exception {
    router = Router.shared();
    nc = router.connect();
    client = ToolbusClient.builder(nc).source("java-test").build();
    worker = Worker.builder(nc).id("jw-" + Ids.next()).maxConcurrent(8).build();
    worker.tool(ToolDef.builder("j_add").description("Add two numbers.").readOnly(true), AddIn.class,
        (c, in) -> String.valueOf(in.a() + in.b()));
    worker.tool(ToolDef.builder("j_context").readOnly(true).inputSchema(Map.of("type", "object")).build(),
        c -> Map.of("user", c.userString(), "tenant", c.contextValue("tenant", String.class)));
    worker.tool(ToolDef.builder("j_progress").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
      c.progress(Block.text("step 1"));
      c.progress(Block.text("step 2"));
      return "done";
    });
    worker.tool(ToolDef.builder("j_big_progress").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
      c.progress(Block.text("x".repeat(100 << 10)));
      return "sent";
    });
    worker.tool(ToolDef.builder("j_slow").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
      slowStarted.countDown();
      Thread.sleep(TimeUnit.MINUTES.toMillis(5));
      return "never";
    });
    worker.tool(ToolDef.builder("j_big").readOnly(true).inputSchema(Map.of("type", "object")).build(),
        c -> "x".repeat(3 << 20));
    worker.tool(ToolDef.builder("j_fail").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
      throw new IllegalStateException("the disk is on fire");
    });
    worker.tool(ToolDef.builder("j_write").description("Write.").inputSchema(Map.of("type", "object",
        "properties", Map.of("v", Map.of("type", "string")))).build(), c -> "wrote " + c.input().path("v").asText());
    worker.tool(ToolDef.builder("j_pick").description("Pick a file.").external(true).permission("allow")
        .inputSchema(Map.of("type", "object")).build(), c -> "unused");
    worker.tool(ToolDef.builder("j_busy").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
      int n = running.incrementAndGet();
      maxRunning.accumulateAndGet(n, Math::max);
      Thread.sleep(50);
      running.decrementAndGet();
      return "ok";
    });
    worker.tool(ToolDef.builder("j_durable").readOnly(true).durable(true).inputSchema(Map.of("type", "object")).build(),
        c -> {
          c.progress(Block.text("durable step"));
          return "durable " + c.attempt();
        });
    JsonNode ack = worker.start();
    assertEquals(0, ack.path("rejected").size(), ack.toString());
  }

  @AfterAll
  static void tearDown() throws Exception {
    worker.drain(Duration.ofSeconds(5));
    nc.close();
  }

  @Test
  void callReply() {
    String s = Router.session();
    Reply r = client.call(s, Batch.builder().call("c1", "j_add", Map.of("a", 2, "b", 3.5)).build());
    assertEquals(1, r.results().size());
    assertEquals("success", r.results().get(0).state());
    assertEquals("5.5", r.results().get(0).text());
    assertTrue(r.parked().isEmpty());
  }

  @Test
  void stringInputAndSchemaValidation() {
    String s = Router.session();
    Reply r = client.call(s, Batch.builder().call("c1", "j_add", "{\"a\": 1, \"b\": 2}")
        .call("c2", "j_add", Map.of("a", "one")).call("c3", "nope", Map.of()).build());
    assertEquals("3.0", r.result("c1").text());
    assertEquals("invalid_input", r.result("c2").code());
    assertTrue(r.result("c2").text().startsWith("Input validation failed for tool 'j_add':"), r.result("c2").text());
    assertEquals("unknown_tool", r.result("c3").code());
    assertEquals("ToolNotFoundError: The tool named 'nope' doesn't exist.", r.result("c3").text());
  }

  @Test
  void runtimeContextReachesTheTool() {
    Reply r = client.call(Router.session(), Batch.builder().call("c1", "j_context", Map.of())
        .user("alice").context(Map.of("tenant", "acme")).build());
    assertEquals(Json.tree(Map.of("user", "alice", "tenant", "acme")), Json.parse(r.results().get(0).text().getBytes(StandardCharsets.UTF_8), "x", "y"));
  }

  @Test
  void toolErrorsBecomeErrorResults() {
    Result r = client.call(Router.session(), Batch.builder().call("c1", "j_fail", Map.of()).build()).results().get(0);
    assertEquals("tool_error", r.code());
    assertEquals("Error: the disk is on fire", r.text());
  }

  @Test
  void listsToolsInEveryFormat() {
    String s = Router.session();
    for (String f : List.of("toolbus", "openai", "openai-responses", "anthropic", "gemini", "mcp")) {
      ToolsList l = client.tools(s, f, null, null);
      JsonNode add = l.tools().stream().filter(t -> Json.text(t).contains("\"j_add\"")).findFirst().orElseThrow();
      switch (f) {
        case "toolbus" -> {
          assertEquals(true, add.path("read_only").asBoolean());
          assertEquals("number", add.path("input_schema").path("properties").path("a").path("type").asText());
          assertEquals("first", add.path("input_schema").path("properties").path("a").path("description").asText());
        }
        case "openai" -> assertEquals("j_add", add.path("function").path("name").asText());
        case "openai-responses" -> assertEquals("function", add.path("type").asText());
        case "anthropic" -> assertTrue(add.has("input_schema"));
        case "gemini" -> assertTrue(add.has("parametersJsonSchema") && !add.has("parameters"), add.toString());
        default -> assertTrue(add.path("annotations").path("readOnlyHint").asBoolean());
      }
    }
    BusException e = assertThrows(BusException.class, () -> client.tools(s, "xml", null, null));
    assertEquals("bad_request", e.code());
  }

  /** A deferred listing names the group of each deferred tool; a load activates it, the active groups kept (4.1, 4.2). */
  @Test
  void deferredListingAndLoads() throws Exception {
    String g1 = "jg1_" + Ids.next().substring(0, 8), g2 = "jg2_" + Ids.next().substring(0, 8);
    String t1 = "j_" + g1, t2 = "j_" + g2;
    Worker w = Worker.builder(nc).id("jw-" + Ids.next()).group(Group.meta(g1, "First.")).group(Group.meta(g2, "Forecasts.")).build();
    w.tool(ToolDef.builder(t1).readOnly(true).groups(g1).inputSchema(Map.of("type", "object")).build(), c -> "one");
    w.tool(ToolDef.builder(t2).description("Forecast.").readOnly(true).groups(g2).inputSchema(Map.of("type", "object")).build(), c -> "two");
    assertEquals(0, w.start().path("rejected").size());
    try {
      String s = Router.session();
      client.call(s, Batch.builder().call("r", "reset_tools", ToolsList.resetInput(List.of(g1))).build());
      ToolsList l = client.tools(s, "anthropic", null, null, true);
      assertEquals(g2, l.deferred().get(t2), l.deferred().toString());
      assertFalse(l.deferred().containsKey(t1)); // active: listed up front
      assertTrue(l.tools().stream().anyMatch(t -> t2.equals(t.path("name").asText()) && t.path("defer_loading").asBoolean()));
      assertTrue(client.tools(s, "anthropic", null, null).deferred().isEmpty());
      assertEquals("bad_request", assertThrows(BusException.class, () -> client.tools(s, "openai", null, null, true)).code());
      List<String> fin = l.afterLoads(List.of("nope"), List.of(t2, "unknown"));
      assertEquals(List.of(g1, g2), fin);
      Reply r = client.call(s, Batch.builder().call("load", "reset_tools", ToolsList.resetInput(fin)).call("c1", t2, Map.of()).build());
      assertEquals("success", r.result("load").state(), r.result("load").text());
      assertEquals("two", r.result("c1").text());
      assertEquals("one", client.call(s, Batch.builder().call("c2", t1, Map.of()).build()).result("c2").text());
    } finally {
      w.drain(Duration.ofSeconds(5));
    }
  }

  @Test
  void progressIsStreamed() throws Exception {
    String s = Router.session();
    try (EventWatch w = client.watch(s)) {
      Reply r = client.call(s, "r1", Batch.builder().call("c1", "j_progress", Map.of()).build(), null);
      assertEquals("done", r.results().get(0).text());
      Event p1 = w.await(Codes.CALL_PROGRESS, "r1", Router.BOUND);
      Event p2 = w.await(Codes.CALL_PROGRESS, "r1", Router.BOUND);
      assertEquals(1, p1.dataTree().path("seq").asInt());
      assertEquals("step 2", p2.dataTree().path("output").get(0).path("text").asText());
      assertEquals("c1", p1.toolcallid);
      assertEquals("c1", p1.subject);
      assertEquals(s, p1.sessionid);
      assertTrue(p1.source.startsWith("toolbus/router/")); // the router publishes it (1.18)
    }
  }

  /**
   * Protocol 1.19: a progress message is at most 64 KiB (Codes.MAX_PROGRESS), which a router
   * takes; a larger block is stored and sent by reference.
   */
  @Test
  void progressUnderTheCap() throws Exception {
    try (Connection raw = router.connect()) {
      String inbox = raw.createInbox();
      io.nats.client.Subscription sub = raw.subscribe(inbox + ".>");
      io.nats.client.Subscription result = raw.subscribe(inbox);
      raw.flush(Duration.ofSeconds(5));
      Event e = Event.of(Codes.EXEC, "toolbus/router/test", Map.of("call", Map.of("id", "c1", "name", "j_big_progress",
          "input", Map.of()), "attempt", 1, "progress_reply", true));
      e.sessionid = "jwire";
      e.replyid = "r-big";
      e.toolcallid = "c1";
      raw.publish(e.toMessage("toolbus.exec.j_big_progress", inbox));
      Message p = sub.nextMessage(Duration.ofSeconds(10));
      assertNotNull(p, "no progress");
      assertTrue(p.getData().length <= Codes.MAX_PROGRESS, p.getData().length + " bytes");
      boolean stored = false;
      for (JsonNode b : Event.decode(p).dataTree().path("output")) {
        stored |= !"text".equals(b.path("type").asText());
      }
      assertTrue(stored, "the text not stored: " + Event.decode(p).dataTree());
      Message r = result.nextMessage(Duration.ofSeconds(10));
      assertNotNull(r);
      assertEquals("sent", Event.decode(r).dataTree().path("output").path(0).path("text").asText());
    }
  }

  /**
   * Protocol 1.18: progress goes to the exec's reply subject + ".progress" when the exec says
   * progress_reply (its router publishes it), and on the session's events otherwise (a router of
   * 1.17), as before; the result goes to the reply subject either way.
   */
  @Test
  void progressGoesWhereTheExecSays() throws Exception {
    try (Connection raw = router.connect()) {
      for (boolean says : new boolean[] {true, false}) {
        String inbox = raw.createInbox();
        io.nats.client.Subscription sub = raw.subscribe(inbox + ".>");
        io.nats.client.Subscription result = raw.subscribe(inbox);
        io.nats.client.Subscription events = raw.subscribe("toolbus.events.jwire");
        raw.flush(Duration.ofSeconds(5));
        Map<String, Object> data = new java.util.HashMap<>(Map.of("call", Map.of("id", "c1", "name", "j_progress", "input", Map.of()),
            "attempt", 1));
        if (says) {
          data.put("progress_reply", true);
        }
        Event e = Event.of(Codes.EXEC, "toolbus/router/test", data);
        e.sessionid = "jwire";
        e.replyid = "r-" + says;
        e.toolcallid = "c1";
        raw.publish(e.toMessage("toolbus.exec.j_progress", inbox));
        Message p = (says ? sub : events).nextMessage(Duration.ofSeconds(10));
        assertNotNull(p, "no progress, progress_reply " + says);
        assertEquals(says ? inbox + ".progress" : "toolbus.events.jwire", p.getSubject());
        assertEquals(Codes.CALL_PROGRESS, Event.decode(p).type);
        assertEquals(1, Event.decode(p).dataTree().path("seq").asInt());
        Message r = result.nextMessage(Duration.ofSeconds(10));
        assertNotNull(r);
        assertEquals(Codes.EXEC_RESULT, Event.decode(r).type);
        assertNull((says ? events : sub).nextMessage(Duration.ofMillis(1)), "progress on both subjects");
        sub.unsubscribe();
        result.unsubscribe();
        events.unsubscribe();
      }
    }
  }

  @Test
  void concurrencyBoundHolds() throws Exception {
    try (Connection nc2 = router.connect();
        Worker bounded = Worker.builder(nc2).maxConcurrent(1).build()) {
      AtomicInteger now = new AtomicInteger();
      AtomicInteger peak = new AtomicInteger();
      bounded.tool(ToolDef.builder("j_bounded").readOnly(true).inputSchema(Map.of("type", "object")).build(), c -> {
        peak.accumulateAndGet(now.incrementAndGet(), Math::max);
        Thread.sleep(30);
        now.decrementAndGet();
        return "ok";
      });
      bounded.start();
      Batch.Builder b = Batch.builder();
      for (int i = 0; i < 6; i++) {
        b.call("c" + i, "j_bounded", Map.of());
      }
      Reply r = client.call(Router.session(), b.build());
      assertTrue(r.results().stream().allMatch(Result::ok), r.toString());
      assertEquals(1, peak.get());
    }
  }

  @Test
  void cancellingARunningJavaTool() throws Exception {
    String s = Router.session();
    try (EventWatch w = client.watch(s)) {
      client.publish(s, "rc", Batch.builder().call("c1", "j_slow", Map.of()).build());
      assertTrue(slowStarted.await(60, TimeUnit.SECONDS));
      client.cancel(s, "rc", "c1");
      List<Result> done = w.awaitDone("rc", Router.BOUND);
      assertNotNull(done, "no batch.done after the cancel");
      assertEquals("interrupted", done.get(0).state());
      assertEquals(Codes.INTERRUPTED_TEXT, done.get(0).text());
    }
  }

  @Test
  void largeOutputIsStoredAndFetched() {
    String s = Router.session();
    Result r = client.call(s, Batch.builder().call("c1", "j_big", Map.of()).build()).results().get(0);
    assertEquals("success", r.state());
    Block ref = r.output().stream().filter(Block::isStoredOutput).findFirst().orElseThrow(() -> new AssertionError(r.toString()));
    assertEquals(3L << 20, ref.size());
    assertTrue(r.output().get(0).text().contains("is too large to show here"), r.output().get(0).text());
    ToolbusClient.Output o = client.fetch(s, ref.url());
    assertEquals(3 << 20, o.bytes().length);
    assertEquals("x".repeat(3 << 20), new String(o.bytes(), StandardCharsets.UTF_8));
    BusException other = assertThrows(BusException.class, () -> client.fetch(Router.session(), ref.url()));
    assertEquals("bad_request", other.code(), other.getMessage());
    assertThrows(BusException.class, () -> client.fetch(s, ref.url().substring(0, ref.url().indexOf('#'))));
  }

  @Test
  void externalCallParksAndIsAnswered() throws Exception {
    String s = Router.session();
    try (EventWatch w = client.watch(s)) {
      Reply r = client.call(s, "rp", Batch.builder().call("c1", "j_pick", Map.of()).build(), null);
      assertEquals(1, r.parked().size());
      Parked p = r.parked().get(0);
      assertEquals("external", p.kind());
      assertEquals("toolbus.answer.j_pick", p.subject());
      BusException bad = assertThrows(BusException.class, () -> client.answer(s, "rp", "c1", "j_pick",
          new Answer("success", List.of(new Block("text", "x", null, null, null, null, null, null, null, null, null)), true, null, null, null, null)));
      assertEquals("bad_request", bad.code(), bad.getMessage());
      client.answer(s, "rp", "c1", "j_pick", Answer.success(List.of(Block.text("/srv/a.txt"))));
      List<Result> done = w.awaitDone("rp", Router.BOUND);
      assertEquals("/srv/a.txt", done.get(0).text());
      BusException again = assertThrows(BusException.class, () -> client.answer(s, "rp", "c1", "j_pick", Answer.success(List.of(Block.text("y")))));
      assertTrue(List.of("not_parked", "already_answered").contains(again.code()), again.toString());
    }
  }

  @Test
  void confirmationAllowDenyAndCancel() throws Exception {
    String s = Router.session();
    try (EventWatch w = client.watch(s)) {
      Reply r = client.call(s, "ra", Batch.builder().call("c1", "j_write", Map.of("v", "a")).build(), null);
      assertEquals("confirm", r.parked().get(0).kind());
      client.confirm(s, "ra", "c1", "j_write", true, null);
      assertEquals("wrote a", w.awaitDone("ra", Router.BOUND).get(0).text());

      client.call(s, "rd", Batch.builder().call("c1", "j_write", Map.of("v", "b")).build(), null);
      client.confirm(s, "rd", "c1", "j_write", false, "not today");
      Result denied = w.awaitDone("rd", Router.BOUND).get(0);
      assertEquals("denied", denied.state());
      assertTrue(denied.text().contains("not today"), denied.text());

      client.call(s, "rx", Batch.builder().call("c1", "j_write", Map.of("v", "c")).build(), null);
      client.cancel(s, "rx");
      assertEquals("interrupted", w.awaitDone("rx", Router.BOUND).get(0).state());
      BusException e = assertThrows(BusException.class, () -> client.confirm(s, "rx", "c1", "j_write", true, null));
      assertEquals("not_parked", e.code());
    }
  }

  @Test
  void durableToolRuns() throws Exception {
    String s = Router.session();
    try (EventWatch w = client.watch(s)) {
      Result r = client.call(s, "r1", Batch.builder().call("c1", "j_durable", Map.of()).build(), null).results().get(0);
      assertEquals("durable 1", r.text(), r.toString());
      // Its progress went to the exec's progress_inbox, and the router published it (5.8, 1.18).
      Event p = w.await(Codes.CALL_PROGRESS, "r1", Router.BOUND);
      assertTrue(p.source.startsWith("toolbus/router/"));
      assertEquals("durable step", p.dataTree().path("output").get(0).path("text").asText());
    }
  }

  @Test
  void badBatchesAreRefusedAndChangeNothing() throws Exception {
    String s = Router.session();
    assertEquals("bad_event", assertThrows(BusException.class, () -> client.call("bad.session", Batch.builder().call("c", "j_add", Map.of()).build())).code());
    assertEquals("bad_event", assertThrows(BusException.class, () -> client.call(s, "bad id", Batch.builder().call("c", "j_add", Map.of()).build(), null)).code());
    BusException none = assertThrows(BusException.class, () -> client.call(s, Batch.builder().build()));
    assertEquals("bad_request", none.code());
    BusException req = assertThrows(BusException.class, () -> client.call(s, Batch.builder().call("c", "j_add", Map.of("a", 1, "b", 2))
        .request(new Request("everything", null)).build()));
    assertEquals("bad_request", req.code());
    Event raw = Event.of(Codes.CALL_BATCH, "java-test", Map.of("calls", List.of(Map.of("id", "c", "name", "j_add")), "request", Map.of("tools", List.of())));
    raw.sessionid = s;
    Message m = nc.request(raw.toMessage("toolbus.call." + s, null), Duration.ofSeconds(30));
    Event re = Event.decode(m);
    assertEquals(Codes.ERROR, re.type);
    assertEquals("request: unknown member \"tools\"", re.dataTree().path("message").asText());
    Message junk = nc.request("toolbus.call." + s, "not json".getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(30));
    assertEquals("bad_event", Event.decode(junk).dataTree().path("code").asText());
  }

  @Test
  void workerRefusesBadExecRequests() throws Exception {
    Message a = nc.request("toolbus.exec.j_add", "{".getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(30));
    Event ea = Event.decode(a);
    assertEquals(Codes.ERROR, ea.type);
    assertEquals("bad_event", ea.dataTree().path("code").asText());

    Event wrong = Event.of(Codes.EXEC, "t", Map.of("call", Map.of("id", "c1", "name", "j_fail", "input", Map.of())));
    wrong.sessionid = "s1";
    wrong.replyid = "r1";
    Event ew = Event.decode(nc.request(wrong.toMessage("toolbus.exec.j_add", null), Duration.ofSeconds(30)));
    assertTrue(ew.dataTree().path("message").asText().contains("on the subject of"), ew.toString());

    Headers h = new Headers().put("ce-specversion", "1.0").put("ce-id", "x").put("ce-source", "t")
        .put("ce-type", Codes.EXEC).put("ce-sessionid", "%FF");
    Event eh = Event.decode(nc.request(NatsMessage.builder().subject("toolbus.exec.j_add").headers(h).data("{}").build(), Duration.ofSeconds(30)));
    assertEquals("header ce-sessionid is not UTF-8", eh.dataTree().path("message").asText());
  }

  @Test
  void workerAnswersBinaryExecInBinaryMode() throws Exception {
    Event e = Event.of(Codes.EXEC, "t", Map.of("call", Map.of("id", "c1", "name", "j_add", "input", Map.of("a", 1, "b", 1)), "attempt", 1));
    e.sessionid = "sb";
    e.replyid = "rb";
    e.toolcallid = "c1";
    e.source = "toolbus/router/test ü";
    Message m = nc.request(e.toBinaryMessage("toolbus.exec.j_add", null), Duration.ofSeconds(30));
    assertTrue(Event.isBinary(m));
    Event out = Event.decode(m);
    assertEquals(Codes.EXEC_RESULT, out.type);
    assertEquals("c1", out.toolcallid);
    assertEquals("2.0", out.dataTree().path("output").get(0).path("text").asText());
  }

  @Test
  void javaAgentCallsGoBuiltins() {
    Reply r = client.call(Router.session(), Batch.builder().call("c1", "echo", Map.of("text", "hi ü")).call("c2", "get_current_time", Map.of()).build());
    assertEquals("hi ü", r.result("c1").text(), r.toString());
    assertEquals("success", r.result("c2").state());
  }

  @Test
  void javaAgentCallsGoToolworker() throws Exception {
    Process p = new ProcessBuilder(Router.binary("toolworker").toString(), "--nats", router.url(), "--id", "gw" + Ids.next())
        .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    try {
      String s = Router.session();
      Reply r = null;
      for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60); System.nanoTime() < end; ) {
        r = client.call(s, Batch.builder().call("c1", "word_count", Map.of("text", "one two three")).build());
        if (!"unknown_tool".equals(r.results().get(0).code()) && !"unavailable".equals(r.results().get(0).code())) {
          break;
        }
        Thread.sleep(50); // bounded polling for the toolworker's first registration
      }
      assertEquals("success", r.results().get(0).state(), r.toString());
      assertTrue(r.results().get(0).text().contains("3"), r.toString());
    } finally {
      p.destroy();
      p.waitFor(10, TimeUnit.SECONDS);
    }
  }

  @Test
  void goCliCallsAJavaWorker() throws Exception {
    String cli = Router.binary("toolbus").toString();
    Router.Run run = Router.run(Duration.ofSeconds(60), cli, "call", "j_add", "{\"a\": 40, \"b\": 2}", "--nats", router.url(), "--session", Router.session(), "--json");
    assertEquals(0, run.code(), run.output());
    assertTrue(run.output().contains("\"42.0\""), run.output());
  }
}
