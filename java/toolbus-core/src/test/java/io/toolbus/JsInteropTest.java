package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.nats.client.Connection;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Interop with the JavaScript participants of examples/js (written from docs/protocol.md alone):
 * the Java client calls the JS worker's tool, and a JS agent calls a Java worker's tool. Skipped
 * when node or npm is missing or the npm packages cannot be installed (into .cache/js-interop).
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class JsInteropTest {
  static final String[] PACKAGES = {"@nats-io/transport-node@3.4.0", "@nats-io/jetstream@3.4.0"};

  static Path setup() throws Exception {
    assumeTrue(onPath("node") && onPath("npm"), "node and npm are not installed");
    Path root = Router.root();
    Path dir = root.resolve(".cache/js-interop");
    Files.createDirectories(dir);
    if (!Files.exists(dir.resolve("node_modules/@nats-io/transport-node"))) {
      String[] cmd = {"npm", "install", "--prefix", dir.toString(), "--no-audit", "--no-fund", "--loglevel", "error", PACKAGES[0], PACKAGES[1]};
      Router.Run run = Router.run(Duration.ofMinutes(3), cmd);
      assumeTrue(run.code() == 0, "npm install failed (no registry?): " + run.output());
    }
    for (String f : new String[] {"lib.mjs", "worker.mjs"}) {
      Files.copy(root.resolve("examples/js/" + f), dir.resolve(f), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    }
    Files.writeString(dir.resolve("call.mjs"), String.join("\n",
        "import { P, open, event, request } from \"./lib.mjs\";",
        "const nc = await open();",
        "const s = process.env.SESSION;",
        "const r = await request(nc, `${P}.call.${s}`, event(\"io.toolbus.call.batch\", \"js/interop\",",
        "  { calls: [{ id: \"c1\", name: process.env.TOOL, input: JSON.parse(process.env.INPUT) }] }, { sessionid: s }), 20000);",
        "console.log(JSON.stringify(r.data.results[0]));",
        "await nc.close();", ""));
    return dir;
  }

  static boolean onPath(String cmd) {
    for (String d : System.getenv().getOrDefault("PATH", "").split(java.io.File.pathSeparator)) {
      if (Files.isExecutable(Path.of(d, cmd))) {
        return true;
      }
    }
    return false;
  }

  @Test
  void javaAgentCallsJsWorkerAndJsAgentCallsJavaWorker() throws Exception {
    Path dir = setup();
    Router router = Router.shared();
    ProcessBuilder pb = new ProcessBuilder("node", "worker.mjs").directory(dir.toFile()).redirectErrorStream(true);
    pb.environment().put("NATS_URL", router.url());
    pb.environment().put("WORKER_ID", "js-interop-" + Ids.next());
    Process js = pb.start();
    try (Connection nc = router.connect(); Worker w = Worker.builder(nc).build()) {
      BufferedReader out = new BufferedReader(new InputStreamReader(js.getInputStream(), StandardCharsets.UTF_8));
      CompletableFuture<String> ready = CompletableFuture.supplyAsync(() -> {
        try {
          for (String line; (line = out.readLine()) != null; ) {
            if (line.contains("\"ready\"")) {
              return line;
            }
          }
          return "exited";
        } catch (java.io.IOException e) {
          return "exited: " + e;
        }
      });
      assertTrue(ready.get(60, TimeUnit.SECONDS).contains("\"ready\""), "the JS worker did not start");
      ToolbusClient client = ToolbusClient.builder(nc).build();
      Result r = client.call(Router.session(), Batch.builder().call("c1", "js_add", Map.of("a", 2, "b", 3)).build()).results().get(0);
      assertEquals("2 + 3 = 5", r.text(), r.toString());

      w.tool(ToolDef.builder("j_mul").readOnly(true).inputSchema(Map.of("type", "object",
          "properties", Map.of("a", Map.of("type", "number"), "b", Map.of("type", "number")))).build(),
          c -> String.valueOf(c.input().path("a").asDouble() * c.input().path("b").asDouble()));
      w.start();
      ProcessBuilder agent = new ProcessBuilder("node", "call.mjs").directory(dir.toFile()).redirectErrorStream(true);
      agent.environment().putAll(Map.of("NATS_URL", router.url(), "SESSION", Router.session(), "TOOL", "j_mul", "INPUT", "{\"a\":2,\"b\":3}"));
      Process a = agent.start();
      String got = new String(a.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(a.waitFor(60, TimeUnit.SECONDS));
      assertEquals(0, a.exitValue(), got);
      assertTrue(got.contains("\"state\":\"success\"") && got.contains("\"text\":\"6.0\""), got);
    } finally {
      js.destroy();
      if (!js.waitFor(10, TimeUnit.SECONDS)) {
        js.destroyForcibly();
      }
    }
  }
}
