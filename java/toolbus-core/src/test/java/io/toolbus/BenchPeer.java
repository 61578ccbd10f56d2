package io.toolbus;

import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Nats;
import io.nats.client.Options;
import java.util.Map;

/**
 * The far side of {@link CpuPerCallBench}, in a JVM of its own so that its CPU can be measured
 * alone: "raw" answers plain jnats requests on bench.raw; "worker" serves the tool bench_echo
 * with the Java Worker (declaring compact_exec unless -Dtoolbus.bench.exec=binary). Prints "ready" once serving; exits when its stdin closes.
 */
public final class BenchPeer {
  private BenchPeer() {}

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    String url = args[1];
    Connection nc = Nats.connect(new Options.Builder().server(url).build());
    Worker w = null;
    if (mode.equals("raw")) {
      Dispatcher d = nc.createDispatcher(m -> nc.publish(m.getReplyTo(), m.getData()));
      d.subscribe("bench.raw", "bench");
    } else {
      boolean compact = !"binary".equals(System.getProperty("toolbus.bench.exec"));
      w = Worker.builder(nc).id("bench-" + ProcessHandle.current().pid()).compactExec(compact).build();
      w.tool(ToolDef.builder("bench_echo").readOnly(true).inputSchema(Map.of("type", "object",
          "properties", Map.of("text", Map.of("type", "string")))).build(), c -> c.input().path("text").asText());
      w.start();
    }
    nc.flush(java.time.Duration.ofSeconds(10));
    System.out.println("ready");
    System.out.flush();
    while (System.in.read() >= 0) {
      // wait for the parent to close stdin
    }
    if (w != null) {
      w.close();
    }
    nc.close();
  }
}
