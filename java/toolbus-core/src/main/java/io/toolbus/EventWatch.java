package io.toolbus;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A live subscription to a session's events (docs/protocol.md 3.4): results, progress, parked
 * calls and batch.done. Events that do not decode are dropped, and so are those that come while
 * 1024 wait to be read (a flood holds bounded memory). Read them from {@link #next}, or
 * give a listener; close to unsubscribe.
 */
public final class EventWatch implements AutoCloseable {
  private final Connection nc;
  private final Dispatcher d;
  private final BlockingQueue<Event> queue = new LinkedBlockingQueue<>(1024); // as the Go client's Watch; more are dropped
  private final java.util.concurrent.atomic.AtomicInteger busy = new java.util.concurrent.atomic.AtomicInteger();

  EventWatch(Connection nc, String subject, Consumer<Event> listener) {
    this.nc = nc;
    this.d = nc.createDispatcher(m -> {
      busy.incrementAndGet();
      try {
        deliver(m, listener);
      } finally {
        busy.decrementAndGet();
      }
    });
    d.subscribe(subject);
    try {
      nc.flush(Duration.ofSeconds(10));
    } catch (Exception ex) {
      close();
      throw new BusException(Codes.INTERNAL, "watch " + subject + ": " + ex.getMessage(), ex);
    }
  }

  private void deliver(io.nats.client.Message m, Consumer<Event> listener) {
    {
      Event e;
      try {
        e = Event.decode(m);
      } catch (BusException ex) {
        return;
      }
      if (listener != null) {
        listener.accept(e);
      } else {
        queue.offer(e);
      }
    }
  }

  /** The next event, or null when none came within timeout. */
  public Event next(Duration timeout) throws InterruptedException {
    return queue.poll(timeout.toNanos(), TimeUnit.NANOSECONDS);
  }

  /** Waits for the next event of type (and reply id, when not null); null at the timeout. */
  public Event await(String type, String replyId, Duration timeout) throws InterruptedException {
    long end = System.nanoTime() + timeout.toNanos();
    for (long left = timeout.toNanos(); left > 0; left = end - System.nanoTime()) {
      Event e = queue.poll(left, TimeUnit.NANOSECONDS);
      if (e != null && e.type.equals(type) && (replyId == null || replyId.equals(e.replyid))) {
        return e;
      }
    }
    return null;
  }

  /** Waits for batch.done of replyId and returns its results; null at the timeout. */
  public List<Result> awaitDone(String replyId, Duration timeout) throws InterruptedException {
    Event e = await(Codes.BATCH_DONE, replyId, timeout);
    if (e == null) {
      return null;
    }
    JsonNode rs = e.dataTree().path("results");
    List<Result> out = new ArrayList<>();
    for (JsonNode r : rs) {
      out.add(Json.decode(r, Result.class, Codes.BAD_EVENT, "batch.done result"));
    }
    return out;
  }

  /** Waits until every event received so far has been handed over (at most timeout). */
  public void settle(Duration timeout) throws InterruptedException {
    long end = System.nanoTime() + timeout.toNanos();
    for (int idle = 0; idle < 2 && System.nanoTime() < end; ) {
      // idle twice in a row: a message taken off the queue is in the handler by the second look
      idle = d.getPendingMessageCount() == 0 && busy.get() == 0 ? idle + 1 : 0;
      Thread.sleep(1); // bounded: the dispatcher drains what is already queued
    }
  }

  @Override
  public void close() {
    nc.closeDispatcher(d);
  }
}
