package io.toolbus.agentscope;

import static io.toolbus.agentscope.ScriptedModel.calls;
import static io.toolbus.agentscope.ScriptedModel.text;
import static io.toolbus.agentscope.ScriptedModel.use;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.agentscope.core.ReActAgent;
import io.agentscope.core.agent.RuntimeContext;
import io.agentscope.core.event.AgentEvent;
import io.agentscope.core.event.RequireExternalExecutionEvent;
import io.agentscope.core.event.RequireUserConfirmEvent;
import io.agentscope.core.message.ContentBlock;
import io.agentscope.core.message.GenerateReason;
import io.agentscope.core.message.Msg;
import io.agentscope.core.message.TextBlock;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolResultMessage;
import io.agentscope.core.message.UserMessage;
import io.agentscope.core.model.ToolSchema;
import io.agentscope.core.tool.Toolkit;
import io.nats.client.Connection;
import io.toolbus.Group;
import io.toolbus.Router;
import io.toolbus.ToolbusClient;
import io.toolbus.Worker;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The seed page's examples run twice, once with AgentScope's in-process Toolkit and once through
 * the bus (a real router, the same tool objects served by {@link AgentScopeTools}, the agent on a
 * {@link BusToolkit}); the scripted model records what it is shown, and the two runs are compared.
 * Every difference asserted here is written down in docs/agentscope.md (## Java).
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class DifferentialTest {
  static Router router;
  static Connection nc;
  static Worker worker;
  static ToolbusClient client;
  static final SeedTools.UserContext ALICE = new SeedTools.UserContext("alice", "acme");

  @BeforeAll
  static void setUp() throws Exception {
    java.nio.file.Path skills = java.nio.file.Files.createTempDirectory("toolbus-skills");
    java.nio.file.Path pdf = java.nio.file.Files.createDirectories(skills.resolve("pdf"));
    java.nio.file.Files.writeString(pdf.resolve("SKILL.md"),
        "---\nname: pdf\ndescription: Work with PDF files.\n---\nCount pages with pdf_pages.\n");
    router = Router.start("--builtin=false", "--skills", skills.toString());
    nc = router.connect();
    client = ToolbusClient.builder(nc).source("agentscope-test").build();
    worker = Worker.builder(nc).id("as-" + io.toolbus.Ids.next())
        .group(Group.meta("database", "Database tools"))
        .group(Group.meta("pdf_tools", "PDF tools").withActivateOnSkill("pdf")).build();
    AgentScopeTools.builder()
        .tool(new SeedTools.SimpleTools()).tool(new SeedTools.WebSearchTool())
        .tool(new SeedTools.HumanApprovalTool()).tool(new SeedTools.DeployTools())
        .tool(new SeedTools.DatabaseTools()).group("query_db", "database")
        .tool(new SeedTools.PdfTools()).group("pdf_pages", "pdf_tools")
        .tool(new SeedTools.NotesTool())
        .inject("user_context", SeedTools.UserContext.class)
        .build().serveOn(worker);
    var ack = worker.start();
    assertEquals(0, ack.path("rejected").size(), ack.toString());
  }

  @AfterAll
  static void tearDown() throws Exception {
    worker.close();
    nc.close();
    router.stop();
  }

  static Toolkit inProcess() {
    Toolkit tk = new Toolkit();
    tk.registerTool(new SeedTools.SimpleTools());
    tk.registerTool(new SeedTools.WebSearchTool());
    tk.registerTool(new SeedTools.HumanApprovalTool());
    return tk;
  }

  static ReActAgent agent(ScriptedModel m, Toolkit tk, boolean meta) {
    return ReActAgent.builder().name("assistant").sysPrompt("You help.").model(m).toolkit(tk).enableMetaTool(meta).build();
  }

  static Msg ask(String s) {
    return UserMessage.builder().name("user").content(TextBlock.builder().text(s).build()).build();
  }

  static RuntimeContext ctx(String session) {
    RuntimeContext rc = RuntimeContext.builder().sessionId(session).userId("alice").build();
    rc.put(SeedTools.UserContext.class, ALICE);
    return rc;
  }

  BusToolkit bus(String session) {
    return bus(session, e -> {});
  }

  BusToolkit bus(String session, java.util.function.Consumer<AgentEvent> events) {
    return BusToolkit.builder(client, session).user("alice").onEvent(events)
        .context(Map.of("user_context", Map.of("name", "alice", "tenant", "acme"))).build();
  }

  static List<List<ContentBlock>> script() {
    return List.of(
        calls(use("t1", "get_current_time", Map.of("timezone", "UTC")), use("t2", "web_search", Map.of("query", "nats")),
            use("t3", "whoami", Map.of()), use("t4", "count_to", Map.of("n", 2))),
        calls(use("t5", "get_current_time", Map.of()), use("t6", "no_such_tool", Map.of()),
            use("t7", "web_search", Map.of("query", 42))),
        text("all done"));
  }

  @Test
  void sameToolsSameResults() throws Exception {
    ScriptedModel a = new ScriptedModel(script());
    Msg ra = agent(a, inProcess(), false).call(List.of(ask("go")), ctx("s-local")).block(Duration.ofSeconds(60));
    String session = Router.session();
    ScriptedModel b = new ScriptedModel(script());
    Msg rb;
    try (BusToolkit tk = bus(session)) {
      rb = agent(b, tk, false).call(List.of(ask("go")), ctx(session)).block(Duration.ofSeconds(60));
    }
    assertEquals("all done", ra.getTextContent());
    assertEquals("all done", rb.getTextContent());

    // What the model sees: every in-process tool, with the same schema, is listed by the bus.
    Map<String, String> local = a.toolsSeen.get(0);
    Map<String, String> remote = b.toolsSeen.get(0);
    for (var e : local.entrySet()) {
      assertEquals(e.getValue(), remote.get(e.getKey()), "schema of " + e.getKey());
    }
    // The bus lists the deployment's other basic tools too, and no meta tool without meta groups active.
    assertTrue(remote.containsKey("deploy") && remote.containsKey("reset_tools"), remote.keySet().toString());
    assertFalse(remote.containsKey("query_db"), "query_db's group is inactive");

    // Every result the model is shown is the same, error texts included: the adapter presents
    // unknown tools and schema failures with AgentScope's own texts.
    assertEquals(a.resultsSeen, b.resultsSeen);
    assertEquals("\"2026-12-03 10:00:00 UTC\"", a.resultsSeen.get("t1"));
    assertEquals("3 results for nats", a.resultsSeen.get("t2"));
    assertEquals("\"alice@acme\"", a.resultsSeen.get("t3"));
    assertEquals("\"counted to 2\"", a.resultsSeen.get("t4"));
    assertTrue(a.resultsSeen.get("t5").startsWith("Error: Parameter validation failed for tool 'get_current_time'"), a.resultsSeen.get("t5"));
    assertEquals("Error: Tool not found: no_such_tool", a.resultsSeen.get("t6"));
    assertTrue(a.resultsSeen.get("t7").startsWith("Error: Parameter validation failed for tool 'web_search'"), a.resultsSeen.get("t7"));
  }

  static Map<String, String> pick(Map<String, String> m, List<String> ids) {
    Map<String, String> out = new TreeMap<>();
    ids.forEach(i -> out.put(i, m.get(i)));
    return out;
  }

  @Test
  void externalToolSuspendsAndResumes() throws Exception {
    List<List<ContentBlock>> script = List.of(calls(use("h1", "human_approval", Map.of("action", "wipe"))), text("thanks"));
    ScriptedModel a = new ScriptedModel(script);
    ReActAgent la = agent(a, inProcess(), false);
    RuntimeContext rcA = ctx("s-ext");
    Msg sa = la.call(List.of(ask("go")), rcA).block(Duration.ofSeconds(60));
    assertEquals(GenerateReason.TOOL_SUSPENDED, sa.getGenerateReason());
    Msg fa = la.call(List.of(new ToolResultMessage(ToolResultBlock.of("h1", "human_approval", TextBlock.builder().text("approved").build()))), rcA)
        .block(Duration.ofSeconds(60));

    String session = Router.session();
    ScriptedModel b = new ScriptedModel(script);
    List<AgentEvent> events = new CopyOnWriteArrayList<>();
    try (BusToolkit tk = bus(session, events::add)) {
      ReActAgent lb = agent(b, tk, false);
      RuntimeContext rcB = ctx(session);
      Msg sb = lb.call(List.of(ask("go")), rcB).block(Duration.ofSeconds(60));
      assertEquals(GenerateReason.TOOL_SUSPENDED, sb.getGenerateReason());
      assertEquals(List.of("h1"), ParkedCalls.suspendedIds(sb));
      assertEquals(suspendedText(sa), suspendedText(sb));
      assertTrue(events.get(0) instanceof RequireExternalExecutionEvent, events.toString());
      tk.parked().answer(ToolResultBlock.of("h1", "human_approval", TextBlock.builder().text("approved").build()));
      Msg fb = lb.call(List.of(tk.parked().awaitResults(sb, Duration.ofSeconds(60))), rcB).block(Duration.ofSeconds(60));
      assertEquals(fa.getTextContent(), fb.getTextContent());
    }
    assertEquals(a.resultsSeen, b.resultsSeen);
    assertEquals("approved", b.resultsSeen.get("h1"));
  }

  static String suspendedText(Msg m) {
    return m.getContentBlocks(ToolResultBlock.class).get(0).getOutput().stream()
        .map(c -> ((TextBlock) c).getText()).reduce("", String::concat);
  }

  @Test
  void confirmationThroughTheCliResumesTheAgent() throws Exception {
    String session = Router.session();
    ScriptedModel b = new ScriptedModel(List.of(calls(use("d1", "deploy", Map.of("service", "api"))), text("shipped")));
    List<AgentEvent> events = new CopyOnWriteArrayList<>();
    try (BusToolkit tk = bus(session, events::add)) {
      ReActAgent agent = agent(b, tk, false);
      Msg s = agent.call(List.of(ask("deploy")), ctx(session)).block(Duration.ofSeconds(60));
      assertEquals(GenerateReason.TOOL_SUSPENDED, s.getGenerateReason());
      assertEquals("[Awaiting user confirmation]", suspendedText(s));
      assertTrue(events.get(0) instanceof RequireUserConfirmEvent, events.toString());
      Router.Run run = Router.run(Duration.ofSeconds(60), Router.binary("toolbus").toString(), "confirm", "d1",
          "--session", session, "--nats", router.url());
      assertEquals(0, run.code(), run.output());
      Msg f = agent.call(List.of(tk.parked().awaitResults(s, Duration.ofSeconds(60))), ctx(session)).block(Duration.ofSeconds(60));
      assertEquals("shipped", f.getTextContent());
    }
    assertEquals("\"deployed api\"", b.resultsSeen.get("d1"));
  }

  @Test
  void groupsAndTheMetaTool() throws Exception {
    // In process: AgentScope's reset_equipped_tools (enableMetaTool) over a META group.
    Toolkit tk = inProcess();
    tk.createToolGroup("database", "Database tools", false);
    tk.registration().tool(new SeedTools.DatabaseTools()).group("database").apply();
    tk.createToolGroup("pdf_tools", "PDF tools", false); // the bus deployment has this meta group too
    tk.registration().tool(new SeedTools.PdfTools()).group("pdf_tools").apply();
    ScriptedModel a = new ScriptedModel(List.of(calls(use("g1", "reset_equipped_tools", Map.of("to_activate", List.of("database")))),
        calls(use("g2", "query_db", Map.of("sql", "select 1"))), text("ok")));
    agent(a, tk, true).call(List.of(ask("db")), ctx("s-grp")).block(Duration.ofSeconds(60));

    // On the bus: the router's reset_tools over the worker's meta group.
    String session = Router.session();
    ScriptedModel b = new ScriptedModel(List.of(calls(use("g1", "reset_equipped_tools", Map.of("to_activate", List.of("database")))),
        calls(use("g2", "query_db", Map.of("sql", "select 1"))), text("ok")));
    try (BusToolkit bt = bus(session)) {
      agent(b, bt, true).call(List.of(ask("db")), ctx(session)).block(Duration.ofSeconds(60));
    }
    // Without enableMetaTool the bus's own reset_tools is shown and runs.
    ScriptedModel c = new ScriptedModel(List.of(calls(use("g1", "reset_tools", Map.of("database", true))),
        calls(use("g2", "query_db", Map.of("sql", "select 1"))), text("ok")));
    try (BusToolkit bt = bus(Router.session())) {
      agent(c, bt, false).call(List.of(ask("db")), ctx(session)).block(Duration.ofSeconds(60));
    }
    assertEquals("\"1 row for select 1\"", c.resultsSeen.get("g2"));
    assertTrue(c.toolsSeen.get(0).containsKey("reset_tools"));
    System.out.println("GROUPS in-process: " + a.resultsSeen + " tools " + a.toolsSeen.get(0).keySet() + " then " + a.toolsSeen.get(1).keySet());
    System.out.println("GROUPS bus:        " + b.resultsSeen + " tools " + b.toolsSeen.get(0).keySet() + " then " + b.toolsSeen.get(1).keySet());
    assertEquals("\"1 row for select 1\"", a.resultsSeen.get("g2"));
    assertEquals("\"1 row for select 1\"", b.resultsSeen.get("g2"));
    assertFalse(a.toolsSeen.get(0).containsKey("query_db"));
    assertTrue(a.toolsSeen.get(1).containsKey("query_db"));
    assertFalse(b.toolsSeen.get(0).containsKey("query_db"));
    assertTrue(b.toolsSeen.get(1).containsKey("query_db"));
    assertEquals(a.resultsSeen, b.resultsSeen);
    assertEquals(a.toolsSeen.get(0).get("reset_equipped_tools"), b.toolsSeen.get(0).get("reset_equipped_tools"));
    assertFalse(b.toolsSeen.get(0).containsKey("reset_tools"));
    assertEquals("The currently activated tool group(s): database.\n<tool-instructions>\n<group name=\"database\">Database tools</group>\n</tool-instructions>", b.resultsSeen.get("g1"));
  }

  @Test
  void requestScopedToolsInEveryMergeMode() throws Exception {
    ToolSchema pick = ToolSchema.builder().name("pick_file").description("Ask the user to pick a file.")
        .parameters(Map.of("type", "object", "properties", Map.of())).build();
    String session = Router.session();
    try (BusToolkit tk = bus(session)) {
      tk.request(new BusRequestConfig(BusRequestConfig.MergeMode.MERGE_EXTERNAL_PRIORITY, List.of(pick)));
      List<String> merged = names(tk.getToolSchemas());
      assertTrue(merged.contains("pick_file") && merged.contains("web_search"), merged.toString());
      assertEquals("pick_file", merged.get(merged.size() - 1));
      tk.request(new BusRequestConfig(BusRequestConfig.MergeMode.EXTERNAL_ONLY, List.of(pick)));
      assertEquals(List.of("pick_file"), names(tk.getToolSchemas()));
      tk.request(new BusRequestConfig(BusRequestConfig.MergeMode.AGENT_ONLY, null));
      assertFalse(names(tk.getToolSchemas()).contains("pick_file"));

      // A request-scoped tool's call parks for the caller, who answers it itself.
      tk.request(new BusRequestConfig(BusRequestConfig.MergeMode.MERGE_EXTERNAL_PRIORITY, List.of(pick)));
      ScriptedModel m = new ScriptedModel(List.of(calls(use("p1", "pick_file", Map.of())), text("got it")));
      ReActAgent agent = agent(m, tk, false);
      Msg s = agent.call(List.of(ask("pick")), ctx(session)).block(Duration.ofSeconds(60));
      assertEquals(GenerateReason.TOOL_SUSPENDED, s.getGenerateReason());
      tk.parked().answer(ToolResultBlock.of("p1", "pick_file", TextBlock.builder().text("/srv/a.txt").build()));
      Msg f = agent.call(List.of(tk.parked().awaitResults(s, Duration.ofSeconds(60))), ctx(session)).block(Duration.ofSeconds(60));
      assertEquals("got it", f.getTextContent());
      assertEquals("/srv/a.txt", m.resultsSeen.get("p1"));
    }
    try {
      new BusRequestConfig(BusRequestConfig.MergeMode.AGENT_ONLY, List.of(pick));
      throw new AssertionError("AGENT_ONLY with tools was accepted");
    } catch (IllegalArgumentException e) {
      assertEquals("AGENT_ONLY cannot include external tools", e.getMessage());
    }
  }

  @Test
  void aSkillActivatesItsToolGroup() throws Exception {
    String session = Router.session();
    ScriptedModel m = new ScriptedModel(List.of(
        calls(use("k1", "load_skill_through_path", Map.of("skillId", "pdf", "path", "SKILL.md"))),
        calls(use("k2", "pdf_pages", Map.of("file", "a.pdf"))), text("3 pages")));
    try (BusToolkit tk = bus(session)) {
      Msg r = agent(m, tk, true).call(List.of(ask("pages?")), ctx(session)).block(Duration.ofSeconds(60));
      assertEquals("3 pages", r.getTextContent());
      assertTrue(tk.skillsPrompt().contains("## pdf"), tk.skillsPrompt());
    }
    assertTrue(m.toolsSeen.get(0).containsKey("load_skill_through_path"));
    assertFalse(m.toolsSeen.get(0).containsKey("pdf_pages"));
    assertTrue(m.toolsSeen.get(1).containsKey("pdf_pages"));
    assertTrue(m.resultsSeen.get("k1").startsWith("Skill: pdf\nDescription: Work with PDF files."), m.resultsSeen.get("k1"));
    assertEquals("\"a.pdf has 3 pages\"", m.resultsSeen.get("k2"));
  }

  @Test
  void stateInjectedToolsKeepTheAgentState() throws Exception {
    List<List<ContentBlock>> script = List.of(calls(use("n1", "notes", Map.of("note", "blue"))),
        calls(use("n2", "notes", Map.of())), text("ok"));
    Toolkit tk = inProcess();
    tk.registerTool(new SeedTools.NotesTool());
    ScriptedModel a = new ScriptedModel(script);
    agent(a, tk, false).call(List.of(ask("note")), ctx("s-notes")).block(Duration.ofSeconds(60));
    String session = Router.session();
    ScriptedModel b = new ScriptedModel(script);
    try (BusToolkit bt = bus(session)) {
      agent(b, bt, false).call(List.of(ask("note")), ctx(session)).block(Duration.ofSeconds(60));
    }
    assertEquals("the note is blue", a.resultsSeen.get("n2"));
    assertEquals(a.resultsSeen, b.resultsSeen);
    var state = client.admin("session.get", session, Map.of()).path("state").path("state");
    assertEquals("blue", state.path("agentscope").path("summary").asText(), state.toString());
  }

  @Test
  void progressStreamsAsAgentScopeDeltas() throws Exception {
    List<List<ContentBlock>> script = List.of(calls(use("p1", "count_to", Map.of("n", 3))), text("ok"));
    List<String> local = deltas(agent(new ScriptedModel(script), inProcess(), false), "s-stream");
    String session = Router.session();
    List<String> remote;
    try (BusToolkit bt = bus(session)) {
      remote = deltas(agent(new ScriptedModel(script), bt, false), session);
    }
    assertEquals(List.of("at 1", "at 2", "at 3"), local);
    assertEquals(local, remote);
  }

  /** The ToolResultTextDeltaEvent texts of one streamed turn. */
  static List<String> deltas(ReActAgent agent, String session) {
    List<String> out = new ArrayList<>();
    agent.streamEvents(List.of(ask("count")), ctx(session))
        .filter(e -> e instanceof io.agentscope.core.event.ToolResultTextDeltaEvent)
        .map(e -> ((io.agentscope.core.event.ToolResultTextDeltaEvent) e).getDelta())
        .doOnNext(out::add).blockLast(Duration.ofSeconds(60));
    return out;
  }

  static List<String> names(List<ToolSchema> l) {
    List<String> out = new ArrayList<>();
    l.forEach(t -> out.add(t.getName()));
    return out;
  }
}
