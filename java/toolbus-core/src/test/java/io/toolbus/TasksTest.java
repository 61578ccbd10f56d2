package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Background tasks (docs/protocol.md 5.10) through the Java client, on a real router with a Java
 * worker: a tool declaring background goes on past its timeout with a handle; its output is read
 * while it runs; the session lists it; another session is refused it; cancel stops its run at the
 * worker; a wait on two tasks (AgentScope Java's wait_async_results) returns both.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TasksTest {
  static Router router;
  static Connection nc;
  static ToolbusClient client;
  static Worker worker;
  static final CountDownLatch release = new CountDownLatch(1);
  static final CountDownLatch stopped = new CountDownLatch(1);

  @BeforeAll
  static void setUp() throws Exception {
    router = Router.shared();
    nc = router.connect();
    client = ToolbusClient.builder(nc).source("java-test-tasks").build();
    worker = Worker.builder(nc).id("jw-tasks-" + Ids.next()).maxConcurrent(8).build();
    worker.tool(ToolDef.builder("j_brew").readOnly(true).background(true).timeoutMs(300)
        .inputSchema(Map.of("type", "object")).build(), c -> {
          c.progress(Block.text("brewing " + c.id()));
          try {
            release.await();
          } catch (InterruptedException e) {
            stopped.countDown();
            throw e;
          }
          return "brewed " + c.id();
        });
    JsonNode ack = worker.start();
    assertEquals(0, ack.path("rejected").size(), ack.toString());
  }

  @AfterAll
  static void tearDown() throws Exception {
    release.countDown();
    worker.drain(Duration.ofSeconds(5));
    nc.close();
  }

  @Test
  void callAsksBackgroundOnTheWire() {
    assertEquals("{\"id\":\"c1\",\"name\":\"t\",\"input\":{},\"background\":true}", Json.text(Call.of("c1", "t", Map.of()).inBackground()));
    assertEquals("{\"id\":\"c1\",\"name\":\"t\",\"input\":{}}", Json.text(Call.of("c1", "t", Map.of())));
  }

  @Test
  void noBackgroundOnTheWire() throws Exception {
    ToolDef d = ToolDef.builder("t").inputSchema("{\"type\":\"object\"}").noBackground(true).build();
    String text = Json.text(d);
    assertTrue(text.contains("\"no_background\":true"), text);
    assertTrue(Json.MAPPER.readValue(text, ToolDef.class).isNoBackground(), text);
    assertTrue(!Json.text(ToolDef.builder("t").inputSchema("{\"type\":\"object\"}").build()).contains("no_background"));
  }

  @Test
  void backgroundTasks() throws Exception {
    String s = Router.session();
    JsonNode def = client.tools(s, "toolbus", null, null).tools().stream()
        .filter(t -> "j_brew".equals(t.path("name").asText())).findFirst().orElseThrow();
    assertTrue(Json.MAPPER.treeToValue(def, ToolDef.class).isBackground(), def.toString());

    Reply r = client.call(s, Batch.builder().call("c1", "j_brew", Map.of()).call(Call.of("c2", "j_brew", Map.of()).inBackground())
        .call("c3", "j_brew", Map.of()).build());
    List<String> ids = r.results().stream().map(x -> {
      assertEquals(Codes.STATE_BACKGROUND, x.state(), x.toString());
      assertEquals("toolbus.tasks." + s, x.task().subject());
      return x.task().id();
    }).toList();

    Task.Reply out = null;
    for (int i = 0; i < 600; i++) { // progress is stored asynchronously: asked again until there
      out = client.taskOutput(s, ids.get(0));
      if (!out.output().isEmpty()) {
        break;
      }
      Thread.sleep(20);
    }
    assertTrue(out.tasks().get(0).running());
    assertEquals("brewing c1", Block.joinText(out.output()));
    assertEquals(3, client.tasks(s).stream().filter(t -> ids.contains(t.id())).count());

    String other = Router.session();
    for (String op : List.of("get", "cancel", "output", "wait")) {
      BusException e = assertThrows(BusException.class, () -> client.taskQuery(other, op, ids.subList(0, 1), 0, false));
      assertEquals(Codes.UNKNOWN_TASK, e.code(), op);
    }

    Task cancelled = client.cancelTask(s, ids.get(2));
    assertEquals(Codes.STATE_INTERRUPTED, cancelled.state());
    assertTrue(stopped.await(60, TimeUnit.SECONDS), "the cancelled run did not stop at the worker");

    release.countDown();
    List<Task> done = client.waitTasks(s, Duration.ofSeconds(60), ids.get(0), ids.get(1));
    assertEquals(List.of("success", "success"), done.stream().map(Task::state).toList());
    assertEquals(List.of("brewed c1", "brewed c2"), done.stream().map(t -> t.result().text()).toList());
  }
}
