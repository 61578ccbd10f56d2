package io.toolbus;

import io.nats.client.ConsumerContext;
import io.nats.client.Message;
import io.nats.client.StreamContext;
import java.time.Duration;
import java.time.Instant;

/**
 * Serves a durable tool (docs/protocol.md 5.8): takes one call from its work consumer whenever a
 * slot is free, reports progress every third of ack_wait while it runs, sends the result to
 * P.result.<tool> until a router records it, then acknowledges the message.
 */
final class Durable {
  private final Worker w;
  private final Worker.Tool t;
  private final Executor exec;
  private volatile boolean stopped;
  private Thread loop;

  Durable(Worker w, Worker.Tool t, Executor exec) {
    this.w = w;
    this.t = t;
    this.exec = exec;
  }

  void start() {
    loop = new Thread(this::run, "toolbus-durable-" + t.def().name());
    loop.setDaemon(true);
    loop.start();
  }

  void stop() {
    stopped = true;
    if (loop != null) {
      loop.interrupt();
    }
  }

  private ConsumerContext consumer() throws InterruptedException {
    while (!stopped) {
      try {
        StreamContext sc = w.connection().getStreamContext(w.subjects().workStream());
        return sc.getConsumerContext(w.subjects().workConsumer(t.def().name()));
      } catch (Exception e) {
        Thread.sleep(100); // routers make the consumer when they take the registration
      }
    }
    return null;
  }

  private void run() {
    try {
      ConsumerContext cc = consumer();
      if (cc == null) {
        return;
      }
      Duration ackWait = cc.getCachedConsumerInfo().getConsumerConfiguration().getAckWait();
      while (!stopped) {
        w.intake().slots().acquire();
        Message m;
        try {
          m = cc.next(Duration.ofSeconds(5));
        } catch (Exception e) {
          w.intake().slots().release();
          if (!stopped) {
            Thread.sleep(100);
          }
          continue;
        }
        if (m == null) {
          w.intake().slots().release();
          continue;
        }
        work(m, ackWait);
      }
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
    }
  }

  private void work(Message m, Duration ackWait) {
    Executor.Checked ch = Executor.check(t, m);
    if (ch.err() == null) {
      Instant exp = ch.e().expiry();
      if (exp != null && Instant.now().isAfter(exp)) {
        m.term(); // its router has ended the call: it must never run
        w.intake().slots().release();
        return;
      }
    }
    String key = w.intake().accept(t, ch);
    WorkReply rp = new WorkReply(m, ch.err() == null ? ch.e().expiry() : null);
    Thread beat = new Thread(() -> {
      try {
        while (!rp.done) {
          Thread.sleep(Math.max(10, ackWait.toMillis() / 3));
          if (!rp.done) {
            m.inProgress();
          }
        }
      } catch (InterruptedException ignored) {
        // the call was answered
      }
    }, "toolbus-durable-beat");
    beat.setDaemon(true);
    beat.start();
    w.intake().pool().execute(() -> {
      try {
        exec.serve(t, ch, rp);
      } finally {
        rp.done = true;
        beat.interrupt();
        w.intake().release(key, true);
      }
    });
  }

  private final class WorkReply implements Replier {
    private final Message m;
    private final Instant deadline;
    volatile boolean done;

    WorkReply(Message m, Instant deadline) {
      this.m = m;
      this.deadline = deadline;
    }

    @Override
    public void result(Event out) {
      done = true;
      Instant until = (deadline == null ? Instant.now() : deadline).plus(Duration.ofMinutes(1));
      Requester rq = new Requester(w.connection());
      for (long delay = 10; Instant.now().isBefore(until) && !w.intake().isCutOff(); delay = Math.min(2 * delay, 1000)) {
        try {
          rq.request(w.subjects().result(t.def().name()), out, Codes.EXEC_RECORDED, Duration.ofSeconds(5));
          m.ackSync(Duration.ofSeconds(5)); // recorded, or another result was first
          return;
        } catch (Exception e) {
          try {
            Thread.sleep(delay);
          } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
            return;
          }
        }
      }
    }

    @Override
    public void refuse(BusException be) {
      done = true;
      m.term();
    }

    @Override
    public void drop() {
      done = true;
      m.nak();
    }
  }
}
