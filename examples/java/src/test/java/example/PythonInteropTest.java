package example;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.nats.client.Connection;
import io.toolbus.Batch;
import io.toolbus.Result;
import io.toolbus.Router;
import io.toolbus.ToolbusClient;
import io.toolbus.Worker;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Interop with the Python SDK (python/, issues 25 and 30) on one real router: the Java client
 * calls py_add served by examples/python/worker.py, and a Python agent (toolbus.Client) calls
 * java_add served by the Java example's AddWorker. The Python is python/test.sh's .cache/venv
 * when it has nats-py, else a venv of its own, .cache/py-interop, with nats-py pinned by
 * python/constraints.txt. Skipped, saying why, without Python 3.10+ or when pip cannot install.
 */
@Timeout(value = 600, unit = TimeUnit.SECONDS)
class PythonInteropTest {
  static final String AGENT = String.join("\n",
      "import asyncio, os, sys, toolbus",
      "async def main():",
      "    async with await toolbus.Client.connect(os.environ['NATS_URL'], source='py-agent') as c:",
      "        loop = asyncio.get_running_loop(); end = loop.time() + 60",
      "        while 'java_add' not in (await c.tools('py-probe')).names:",
      "            if loop.time() > end: sys.exit('java_add never listed')",
      "            await asyncio.sleep(0.1)",
      "        r = (await c.call(os.environ['SESSION'], [toolbus.Call('c1', 'java_add', {'a': 2, 'b': 40})], user='py', timeout=60)).results[0]",
      "        print(r.state, r.text)",
      "asyncio.run(main())", "");

  @Test
  void javaAgentCallsPythonWorkerAndPythonAgentCallsJavaWorker() throws Exception {
    String python = python();
    Path root = Router.root();
    Router router = Router.shared();
    Map<String, String> env = Map.of("NATS_URL", router.url(), "PYTHONPATH", root.resolve("python/src").toString(),
        "SESSION", Router.session());

    ProcessBuilder pb = new ProcessBuilder(python, root.resolve("examples/python/worker.py").toString())
        .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD);
    pb.environment().putAll(env);
    Process py = pb.start();
    try (Connection nc = router.connect()) {
      ToolbusClient client = ToolbusClient.builder(nc).source("java-agent").build();
      long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (client.tools("java-probe", "toolbus", null, null).tools().stream().noneMatch(t -> "py_add".equals(t.path("name").asText()))) {
        assertTrue(py.isAlive(), "examples/python/worker.py exited with " + (py.isAlive() ? 0 : py.exitValue()));
        assertTrue(System.nanoTime() < end, "py_add was never listed");
        Thread.sleep(100);
      }
      Result r = client.call(Router.session(), Batch.builder().call("c1", "py_add", Map.of("a", 2, "b", 40)).build()).results().get(0);
      assertEquals("success", r.state(), r.toString());
      assertEquals("42", r.text(), r.toString());
    } finally {
      py.destroy();
      if (!py.waitFor(20, TimeUnit.SECONDS)) {
        py.destroyForcibly();
      }
    }

    try (Worker w = AddWorker.start(router.url())) {
      Path script = Files.createTempFile("py-agent", ".py");
      try {
        Files.writeString(script, AGENT);
        ProcessBuilder agent = new ProcessBuilder(python, script.toString()).redirectErrorStream(true);
        agent.environment().putAll(env);
        Router.Run run = run(agent, Duration.ofMinutes(2));
        assertEquals(0, run.code(), run.output());
        assertEquals("success 42", run.output().strip(), run.output());
      } finally {
        Files.deleteIfExists(script);
      }
    }
  }

  static Router.Run run(ProcessBuilder pb, Duration timeout) throws Exception {
    Process p = pb.start();
    java.util.concurrent.CompletableFuture<String> out = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
      try {
        return new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
      } catch (java.io.IOException e) {
        return "";
      }
    });
    if (!p.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
      p.destroyForcibly();
      throw new IllegalStateException(pb.command() + " did not end within " + timeout);
    }
    return new Router.Run(p.exitValue(), out.join());
  }

  /** A Python 3.10+ that can import nats-py (see the class comment), or the test is skipped. */
  static String python() throws Exception {
    Path root = Router.root();
    for (String venv : new String[] {".cache/venv", ".cache/py-interop"}) {
      Path py = root.resolve(venv + "/bin/python");
      if (Files.isExecutable(py) && Router.run(Duration.ofMinutes(1), py.toString(), "-c", "import nats").code() == 0) {
        return py.toString();
      }
    }
    String system = null;
    for (String cand : new String[] {"python3", "python3.13", "python3.12", "python3.11", "python3.10"}) {
      if (onPath(cand) && Router.run(Duration.ofMinutes(1), cand, "-c", "import sys; sys.exit(sys.version_info < (3, 10))").code() == 0) {
        system = cand;
        break;
      }
    }
    assumeTrue(system != null, "no Python 3.10 or later on PATH: the Python interop test is skipped");
    Path venv = root.resolve(".cache/py-interop");
    Router.Run made = Router.run(Duration.ofMinutes(3), system, "-m", "venv", venv.toString());
    assumeTrue(made.code() == 0, "python -m venv failed: " + made.output());
    String py = venv.resolve("bin/python").toString();
    Router.Run pip = Router.run(Duration.ofMinutes(5), py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
        "-c", root.resolve("python/constraints.txt").toString(), "nats-py");
    assumeTrue(pip.code() == 0, "pip could not install nats-py (no registry?): " + pip.output());
    return py;
  }

  static boolean onPath(String cmd) {
    for (String d : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)) {
      if (Files.isExecutable(Path.of(d, cmd))) {
        return true;
      }
    }
    return false;
  }
}
