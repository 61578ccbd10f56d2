package io.toolbus.agentscope;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.agentscope.core.message.TextBlock;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolUseBlock;
import io.agentscope.core.permission.PermissionContextState;
import io.agentscope.core.permission.PermissionDecision;
import io.agentscope.core.tool.Tool;
import io.agentscope.core.tool.ToolBase;
import io.agentscope.core.tool.ToolCallParam;
import io.nats.client.Connection;
import io.toolbus.Batch;
import io.toolbus.Result;
import io.toolbus.Router;
import io.toolbus.ToolbusClient;
import io.toolbus.Worker;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import reactor.core.publisher.Mono;

/** Bad input to the adapter, both ways: a clear error, and nothing changes. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AdapterRefusalsTest {
  /** A ToolBase that refuses every input with "rm" in it. */
  static final class Guarded extends ToolBase {
    Guarded() {
      super("guarded_run", "Run a command.", Map.of("type", "object", "properties",
          Map.of("cmd", Map.of("type", "string")), "required", List.of("cmd")), false, false, false, null, false, false);
    }

    @Override
    public Mono<ToolResultBlock> callAsync(ToolCallParam p) {
      return Mono.just(ToolResultBlock.text("ran " + p.getInput().get("cmd")));
    }

    @Override
    public Mono<PermissionDecision> checkPermissions(Map<String, Object> in, PermissionContextState ctx) {
      Object cmd = in.get("cmd");
      return Mono.just(cmd != null && cmd.toString().contains("rm")
          ? PermissionDecision.deny("rm is never allowed") : PermissionDecision.allow("fine"));
    }
  }

  static final class BadName {
    @Tool(name = "bad.name", description = "A name the bus refuses.")
    public String f() {
      return "x";
    }
  }

  @Test
  void deniedByCheckPermissionsOnTheBus() throws Exception {
    Router router = Router.shared();
    try (Connection nc = router.connect(); Worker w = Worker.builder(nc).build()) {
      AgentScopeTools tools = AgentScopeTools.builder().tool(new Guarded()).build();
      assertEquals("allow", tools.definition("guarded_run").permission());
      assertEquals(false, tools.definition("guarded_run").concurrencySafe());
      tools.serveOn(w);
      w.start();
      ToolbusClient c = ToolbusClient.builder(nc).build();
      Result ok = c.call(Router.session(), Batch.builder().call("c1", "guarded_run", Map.of("cmd", "ls")).build()).results().get(0);
      assertEquals("ran ls", ok.text());
      Result no = c.call(Router.session(), Batch.builder().call("c1", "guarded_run", Map.of("cmd", "rm -rf /")).build()).results().get(0);
      assertEquals("tool_error", no.code());
      assertEquals("Error: Permission denied: rm is never allowed", no.text());
    }
  }

  @Test
  void aToolNameTheBusRefusesIsRefusedBeforeServing() throws Exception {
    AgentScopeTools tools = AgentScopeTools.builder().tool(new BadName()).build();
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> tools.definition("bad.name"));
    assertTrue(e.getMessage().contains("must match ^[A-Za-z0-9_-]{1,64}$"), e.getMessage());
  }

  @Test
  void resumingWithWrongIdsIsRefused() throws Exception {
    Router router = Router.shared();
    try (Connection nc = router.connect();
        BusToolkit tk = BusToolkit.builder(ToolbusClient.builder(nc).build(), Router.session()).build()) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> tk.parked().answer(ToolResultBlock.of("nope", "x", TextBlock.builder().text("y").build())));
      assertTrue(e.getMessage().startsWith("Invalid tool result ID: nope"), e.getMessage());
      var suspended = io.agentscope.core.message.AssistantMessage.builder()
          .content(List.of(ToolResultBlock.suspended(new ToolUseBlock("never", "x", Map.of())))).build();
      assertThrows(IllegalStateException.class, () -> tk.parked().awaitResults(suspended, Duration.ofMillis(100)));
      assertThrows(io.toolbus.BusException.class, () -> BusToolkit.builder(ToolbusClient.builder(nc).build(), "bad session"));
    }
  }
}
