package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import io.nats.client.Options;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The worker side of toolbus (docs/protocol.md 5, 7): serves tools on P.exec.<tool> in their
 * queue groups, registers and beats, honours cancels, bounds the calls it runs at once, reads
 * exec requests in structured, binary and compact mode (answering in the form asked), takes durable
 * tools' calls from the work queue, and drains. Add tools, then {@link #start}; {@link #close}
 * drains with a 5 s deadline.
 */
public final class Worker implements AutoCloseable {

  /** A tool served: its definition and handler. */
  record Tool(ToolDef def, Handler handler) {}

  private final Connection nc;
  private final boolean owned;
  private final String id;
  private final Subjects subj;
  private final String source;
  private final Duration heartbeat;
  private final int maxConcurrent;
  private final List<Group> groups;
  private final boolean compactExec;
  private final Offloader off;
  private final List<Tool> tools = new ArrayList<>();
  private final CallTable calls;
  private final Intake intake;
  private final Registrar reg;
  private final ScheduledExecutorService timers;
  private final Executor exec;
  private final List<Dispatcher> dispatchers = new ArrayList<>();
  private final List<Durable> durables = new ArrayList<>();
  private volatile boolean started;
  private volatile boolean closed;

  private Worker(Builder b) {
    this.nc = b.nc;
    this.owned = b.owned;
    this.id = b.id == null ? Ids.next() : Ids.requireId("worker id", b.id);
    this.subj = new Subjects(b.prefix);
    this.source = "toolbus/worker/" + id;
    this.heartbeat = b.heartbeat;
    this.maxConcurrent = b.maxConcurrent;
    this.groups = List.copyOf(b.groups);
    this.compactExec = b.compactExec;
    this.off = new Offloader(nc, subj.outputsBucket(), b.inlineLimit, b.maxOutput);
    this.calls = new CallTable(subj);
    AtomicInteger n = new AtomicInteger();
    ThreadFactory tf = r -> {
      Thread t = new Thread(r, "toolbus-worker-" + id + "-" + n.incrementAndGet());
      t.setDaemon(true);
      return t;
    };
    this.intake = new Intake(maxConcurrent, tf, calls);
    this.reg = new Registrar(nc, subj, id, source, groups, heartbeat, this::definitions, calls, compactExec);
    this.timers = Executors.newScheduledThreadPool(1, tf);
    this.exec = new Executor(this, calls, timers);
  }

  /** A builder on an open connection (not closed by {@link #close}). */
  public static Builder builder(Connection nc) {
    Builder b = new Builder();
    b.nc = nc;
    return b;
  }

  /** A builder that connects to url (reconnecting for ever); {@link #close} closes it. */
  public static Builder connect(String url) throws IOException, InterruptedException {
    Builder b = new Builder();
    b.nc = Urls.connect(new Options.Builder().maxReconnects(-1).connectionName("toolbus-java-worker"), url);
    b.owned = true;
    return b;
  }

  /** Configures a worker. */
  public static final class Builder {
    private Connection nc;
    private boolean owned;
    private String id;
    private String prefix = "toolbus";
    private Duration heartbeat = Duration.ofSeconds(5);
    private int maxConcurrent = 64;
    private final List<Group> groups = new ArrayList<>();
    private int inlineLimit;
    private long maxOutput;
    private boolean compactExec = true;

    /** The worker id (a valid identifier); a random one unless set. */
    public Builder id(String v) { id = v; return this; }
    public Builder prefix(String v) { prefix = v; return this; }
    /** How often the worker registers again; must match the routers' (5 s). */
    public Builder heartbeat(Duration v) { heartbeat = v; return this; }
    /** The calls run at once, across all tools (64 unless set). */
    public Builder maxConcurrent(int v) {
      if (v <= 0) {
        throw new IllegalArgumentException("maxConcurrent must be positive");
      }
      maxConcurrent = v;
      return this;
    }
    /** A group sent with every registration. */
    public Builder group(Group g) { groups.add(g); return this; }
    public Builder inlineLimit(int v) { inlineLimit = v; return this; }
    public Builder maxOutput(long v) { maxOutput = v; return this; }
    /**
     * Whether the worker declares {@code compact_exec} (protocol 1.16, on unless set): its tools
     * get their execs in the compact form when every live worker of theirs declared it, and it
     * answers them with the four headers CloudEvents requires. Off, it reads and answers binary
     * mode as a worker of 1.15 does.
     */
    public Builder compactExec(boolean v) { compactExec = v; return this; }
    public Worker build() { return new Worker(this); }
  }

  public String id() { return id; }
  Connection connection() { return nc; }
  Subjects subjects() { return subj; }
  String source() { return source; }
  Offloader offloader() { return off; }
  CallTable calls() { return calls; }

  /** Adds a raw tool: its handler gets the input as JSON. */
  public synchronized Worker tool(ToolDef def, Handler h) {
    if (started) {
      throw new IllegalStateException("worker: already started");
    }
    for (Tool t : tools) {
      if (t.def().name().equals(def.name())) {
        throw new IllegalArgumentException("worker: tool " + def.name() + " added twice");
      }
    }
    tools.add(new Tool(def, h));
    return this;
  }

  /** Adds a typed tool: the input is decoded into a record of type in, whose schema it gets. */
  public <I> Worker tool(ToolDef.Builder def, Class<I> in, Handler.Typed<I> h) {
    ToolDef d = def.inputSchema(Schemas.of(in)).build();
    return tool(d, c -> h.handle(c, Json.decode(c.input(), in, Codes.INVALID_INPUT, "input")));
  }

  private synchronized List<ToolDef> definitions() {
    List<ToolDef> defs = new ArrayList<>();
    tools.forEach(t -> defs.add(t.def()));
    return defs;
  }

  Intake intake() {
    return intake;
  }

  /** Subscribes every tool, registers, and beats until closed. Returns the first ack's data: {"accepted", "rejected"}. */
  public synchronized JsonNode start() {
    if (started) {
      throw new IllegalStateException("worker: already started");
    }
    started = true;
    Dispatcher cancel = nc.createDispatcher(calls::onCancel);
    cancel.subscribe(subj.all("cancel"));
    dispatchers.add(cancel);
    for (Tool t : tools) {
      if (t.def().isDurable()) {
        Durable d = new Durable(this, t, exec);
        durables.add(d);
        continue;
      }
      Dispatcher d = nc.createDispatcher(m -> onExec(t, m));
      d.setPendingLimits(Math.max(4 * maxConcurrent, 1024), 64L << 20);
      d.subscribe(subj.exec(t.def().name()), subj.execQueue(t.def().name()));
      dispatchers.add(d);
    }
    try {
      nc.flush(Duration.ofSeconds(10));
    } catch (Exception e) {
      throw new BusException(Codes.INTERNAL, "worker: flush: " + e.getMessage(), e);
    }
    JsonNode ack = reg.register();
    timers.scheduleAtFixedRate(reg::beat, heartbeat.toMillis(), heartbeat.toMillis(), TimeUnit.MILLISECONDS);
    durables.forEach(Durable::start);
    return ack;
  }

  private void onExec(Tool t, Message m) {
    Executor.Checked ch = Executor.check(t, m);
    String key = intake.accept(t, ch);
    try {
      intake.slots().acquire(); // back-pressure: blocks this tool's subscription only
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      intake.release(key, false);
      return;
    }
    Replier rp = new CoreReply(m, compactExec && ch.e() != null && BinaryMode.isCompact(m, ch.e()));
    intake.pool().execute(() -> {
      try {
        exec.serve(t, ch, rp);
      } finally {
        intake.release(key, true);
      }
    });
  }

  /** Answers on the request's reply subject, in the form the request came in. */
  private final class CoreReply implements Replier {
    private final Message m;
    private final boolean compact;

    CoreReply(Message m, boolean compact) {
      this.m = m;
      this.compact = compact;
    }

    @Override
    public void result(Event out) {
      String to = m.getReplyTo();
      if (to != null) {
        nc.publish(compact ? BinaryMode.compactMessage(out, to)
            : Event.isBinary(m) ? out.toBinaryMessage(to, null) : out.toMessage(to, null));
      }
    }

    @Override
    public void refuse(BusException be) {
      if (m.getReplyTo() != null) {
        Event e = Event.of(Codes.ERROR, source, java.util.Map.of("code", be.code(), "message", be.getMessage()));
        nc.publish(e.toMessage(m.getReplyTo(), null));
      }
    }

    @Override
    public void drop() {}

    @Override
    public String replyTo() {
      return m.getReplyTo();
    }
  }

  /**
   * Stops the worker: tells the routers it leaves, stops taking calls, lets the calls in flight
   * finish until timeout, then cancels those still running (they send no answer). Returns the
   * number of calls cut off.
   */
  public int drain(Duration timeout) throws InterruptedException {
    synchronized (this) {
      if (closed) {
        return 0;
      }
      closed = true;
    }
    long end = System.nanoTime() + timeout.toNanos();
    timers.shutdownNow();
    durables.forEach(Durable::stop);
    if (started && nc.getStatus() == Connection.Status.CONNECTED) {
      reg.leave();
    }
    for (Dispatcher d : dispatchers) {
      try {
        d.drain(Duration.ofMillis(Math.max(1, TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime()))));
      } catch (Exception e) {
        nc.closeDispatcher(d);
      }
    }
    int cut = intake.awaitIdle(end);
    if (cut > 0) {
      intake.cutOff();
      calls.runningCalls().forEach(c -> c.stop(ToolCall.Stop.DRAINED));
      intake.awaitIdle(System.nanoTime() + TimeUnit.SECONDS.toNanos(1));
    }
    intake.pool().shutdownNow();
    if (owned) {
      nc.close();
    }
    return cut;
  }

  /** Drains with a 5 s deadline. */
  @Override
  public void close() throws InterruptedException {
    drain(Duration.ofSeconds(5));
  }
}
