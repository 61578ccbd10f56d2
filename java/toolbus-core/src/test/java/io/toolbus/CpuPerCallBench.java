package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Connection;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Java client's and worker's CPU per call, each as a ratio to a raw jnats request/reply
 * measured in the same run: the requester side (this JVM: the client, or a plain jnats request)
 * and the responder side (a JVM of its own, {@link BenchPeer}: the Worker, or a plain jnats
 * responder). Sequential calls of a 32-byte text; the router's own CPU is not counted.
 * -Dtoolbus.bench.calls=N sets the measured calls (default 300, a quick check);
 * -Dtoolbus.bench.exec=binary has the worker declare binary_exec only (compact, protocol 1.16,
 * unless set); -Dtoolbus.bench.resend=off has the client re-send nothing (3.2.1); the table goes
 * to target/bench.txt and the test output.
 */
@Timeout(value = 600, unit = TimeUnit.SECONDS)
class CpuPerCallBench {
  static final int CALLS = Integer.getInteger("toolbus.bench.calls", 300);
  static final String TEXT = "x".repeat(32);
  static final String EXEC = System.getProperty("toolbus.bench.exec", "compact");

  record Cpu(double requesterUs, double responderUs) {}

  @Test
  void cpuPerCallAgainstRawJnats() throws Exception {
    Router router = Router.shared();
    Cpu raw;
    Cpu bus;
    try (Connection nc = router.connect()) {
      raw = measure(router, "raw", () -> {
        var m = nc.request("bench.raw", TEXT.getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(30));
        assertTrue(m != null && m.getData().length == TEXT.length());
      });
      ToolbusClient client = ToolbusClient.builder(nc).source("bench")
          .resend("off".equals(System.getProperty("toolbus.bench.resend")) ? Resend.off() : Resend.defaults()).build();
      String session = Router.session();
      Batch b = Batch.builder().call("c1", "bench_echo", Map.of("text", TEXT)).build();
      bus = measure(router, "worker", () -> {
        Reply r = client.call(session, b);
        assertEquals(TEXT, r.results().get(0).text());
      });
    }
    String table = String.format(java.util.Locale.ROOT,
        "Java CPU per call, %d sequential calls, %s exec (µs; ratio to raw jnats request/reply in the same run)%n"
            + "side        toolbus    raw jnats   ratio%n"
            + "client     %8.1f   %8.1f   %6.1fx%n"
            + "worker     %8.1f   %8.1f   %6.1fx%n",
        CALLS, EXEC, bus.requesterUs(), raw.requesterUs(), bus.requesterUs() / raw.requesterUs(),
        bus.responderUs(), raw.responderUs(), bus.responderUs() / raw.responderUs());
    System.out.print(table);
    Files.writeString(Path.of("target", "bench.txt"), table);
  }

  interface Call {
    void run() throws Exception;
  }

  /** Starts a BenchPeer in mode, warms up, and measures CALLS calls on both sides. */
  static Cpu measure(Router router, String mode, Call call) throws Exception {
    String javaBin = ProcessHandle.current().info().command().orElse("java");
    java.util.List<String> cmd = new java.util.ArrayList<>(java.util.List.of(javaBin));
    String jfr = System.getProperty("toolbus.bench.jfr"); // a directory: record the peer with JFR there
    if (jfr != null) {
      cmd.add("-XX:StartFlightRecording=filename=" + jfr + "/" + mode + ".jfr,settings=profile");
    }
    cmd.addAll(java.util.List.of("-Dtoolbus.bench.exec=" + EXEC, "-cp", System.getProperty("java.class.path"), BenchPeer.class.getName(), mode, router.url()));
    Process p = new ProcessBuilder(cmd)
        .redirectError(ProcessBuilder.Redirect.INHERIT).start();
    try {
      BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
      String line = r.readLine();
      while (line != null && !line.equals("ready")) {
        line = r.readLine(); // JFR's startup lines
      }
      assertEquals("ready", line);
      for (int i = 0; i < Math.max(200, CALLS / 2); i++) {
        call.run(); // warm up both JITs
      }
      var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
      long self0 = os.getProcessCpuTime();
      long peer0 = cpu(p);
      for (int i = 0; i < CALLS; i++) {
        call.run();
      }
      long self = os.getProcessCpuTime() - self0;
      long peer = cpu(p) - peer0;
      return new Cpu(self / 1e3 / CALLS, peer / 1e3 / CALLS);
    } finally {
      p.getOutputStream().close();
      if (!p.waitFor(10, TimeUnit.SECONDS)) {
        p.destroyForcibly();
      }
    }
  }

  static long cpu(Process p) {
    return p.toHandle().info().totalCpuDuration().orElseThrow(() -> new IllegalStateException("no CPU time for the peer")).toNanos();
  }
}
