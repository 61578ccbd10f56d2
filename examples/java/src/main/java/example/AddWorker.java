package example;

import io.toolbus.Worker;
import io.toolbus.agentscope.AgentScopeTools;

/**
 * A toolbus worker serving the AgentScope @Tool class {@link AddTools}: java_add, read-only, its
 * schema made by AgentScope's reflection. Run: {@code mvn -q -f examples/java/pom.xml exec:java
 * -Dexec.mainClass=example.AddWorker -Dexec.args=nats://127.0.0.1:4222}. Ctrl-C drains it.
 */
public final class AddWorker {
  private AddWorker() {}

  /** Starts the worker on url and returns it (close it to drain). */
  public static Worker start(String url) throws Exception {
    Worker w = Worker.connect(url).id("java-add-" + ProcessHandle.current().pid()).build();
    AgentScopeTools.builder().tool(new AddTools()).build().serveOn(w);
    w.start();
    return w;
  }

  public static void main(String[] args) throws Exception {
    String url = args.length > 0 ? args[0] : System.getenv().getOrDefault("NATS_URL", "nats://127.0.0.1:4222");
    Worker w = start(url);
    System.out.println("serving java_add on " + io.toolbus.Urls.redact(url) + " as worker " + w.id()); // no password or token in a log
    Object done = new Object();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        w.close();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }));
    synchronized (done) {
      done.wait();
    }
  }
}
