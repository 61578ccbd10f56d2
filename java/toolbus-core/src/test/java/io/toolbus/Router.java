package io.toolbus;

import io.nats.client.Connection;
import io.nats.client.Nats;
import io.nats.client.Options;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real router with its embedded NATS server (JetStream), built from this repository with
 * {@code go build -o .cache/bin/router ./cmd/router} and started once per test JVM on a free
 * port with a temporary --data dir. Readiness is the router's own "serving prefix" line: no
 * sleeps. The process is killed when the JVM exits.
 */
public final class Router {
  private static final Pattern LISTENING = Pattern.compile("embedded NATS listening on (nats://\\S+)");
  private static Router shared;

  private final Process proc;
  private final String url;
  private final List<String> output = Collections.synchronizedList(new ArrayList<>());
  private final Path data;

  /** The repository's root (system property toolbus.root, else found upwards from here). */
  public static Path root() {
    String p = System.getProperty("toolbus.root");
    Path r = p != null ? Path.of(p) : Path.of("").toAbsolutePath();
    while (r != null && !Files.exists(r.resolve("go.mod"))) {
      r = r.getParent();
    }
    if (r == null) {
      throw new IllegalStateException("toolbus: no go.mod above " + Path.of("").toAbsolutePath());
    }
    return r.normalize();
  }

  /** The path of a Go binary of ./cmd/<name>, built into .cache/bin unless -Dtoolbus.prebuilt=true. */
  public static synchronized Path binary(String name) throws IOException, InterruptedException {
    Path root = root();
    Path bin = root.resolve(".cache/bin/" + name);
    if (!Boolean.getBoolean("toolbus.prebuilt") || !Files.isExecutable(bin)) {
      Process p = new ProcessBuilder("go", "build", "-o", bin.toString(), "./cmd/" + name)
          .directory(root.toFile()).redirectErrorStream(true).start();
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (!p.waitFor(10, TimeUnit.MINUTES) || p.exitValue() != 0) {
        throw new IllegalStateException("go build ./cmd/" + name + " failed:\n" + out);
      }
    }
    return bin;
  }

  /** The router shared by every test of this JVM, started on first use. */
  public static synchronized Router shared() throws Exception {
    if (shared == null) {
      shared = start();
      Runtime.getRuntime().addShutdownHook(new Thread(shared::stop));
    }
    return shared;
  }

  /** Starts a router of its own (stop it). */
  public static Router start(String... extra) throws Exception {
    return new Router(extra);
  }

  private Router(String... extra) throws Exception {
    Path bin = binary("router");
    data = Files.createTempDirectory("toolbus-java-router");
    List<String> cmd = new ArrayList<>(List.of(bin.toString(), "--listen", "127.0.0.1:-1", "--data", data.toString()));
    cmd.addAll(List.of(extra));
    proc = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    CompletableFuture<String> ready = new CompletableFuture<>();
    Thread reader = new Thread(() -> read(ready), "router-output");
    reader.setDaemon(true);
    reader.start();
    try {
      url = ready.get(120, TimeUnit.SECONDS);
    } catch (Exception e) {
      stop();
      throw new IllegalStateException("the router did not become ready: " + e + "\n" + String.join("\n", output), e);
    }
  }

  private void read(CompletableFuture<String> ready) {
    String u = null;
    try (BufferedReader r = new BufferedReader(new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        if (output.size() < 2000) {
          output.add(line);
        }
        Matcher m = LISTENING.matcher(line);
        if (m.find()) {
          u = m.group(1);
        }
        if (line.contains("serving prefix") && u != null) {
          ready.complete(u);
        }
      }
    } catch (IOException e) {
      // the process ended
    }
    ready.completeExceptionally(new IllegalStateException("the router exited"));
  }

  /** The embedded NATS server's URL. */
  public String url() {
    return url;
  }

  /** A new NATS connection to the router's server. */
  public Connection connect() throws IOException, InterruptedException {
    return Nats.connect(new Options.Builder().server(url).connectionName("toolbus-java-test").build());
  }

  /** The router's output so far (for failure messages). */
  public String output() {
    synchronized (output) {
      return String.join("\n", output);
    }
  }

  public void stop() {
    proc.destroy();
    try {
      if (!proc.waitFor(10, TimeUnit.SECONDS)) {
        proc.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      proc.destroyForcibly();
      Thread.currentThread().interrupt();
    }
    deleteTree(data.toFile());
  }

  private static void deleteTree(File f) {
    File[] kids = f.listFiles();
    if (kids != null) {
      for (File k : kids) {
        deleteTree(k);
      }
    }
    f.delete();
  }

  /** Runs a command and returns its exit code and combined output; bounded by timeout. */
  public static Run run(Duration timeout, String... cmd) throws IOException, InterruptedException {
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    CompletableFuture<String> out = CompletableFuture.supplyAsync(() -> {
      try {
        return new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      } catch (IOException e) {
        return "";
      }
    });
    if (!p.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
      p.destroyForcibly();
      throw new IllegalStateException(String.join(" ", cmd) + " did not end within " + timeout);
    }
    return new Run(p.exitValue(), out.join());
  }

  /** A finished command. */
  public record Run(int code, String output) {}

  /** A fresh session id. */
  public static String session() {
    return "s" + Ids.next();
  }

  /** Duration.ofNanos(0) guard. */
  static final Duration BOUND = Duration.ofSeconds(60);
}
