package io.toolbus;

import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Sends request events and reads their replies (docs/protocol.md 1): an io.toolbus.error reply
 * becomes a {@link BusException}; a busy reply is sent again after a growing, jittered backoff,
 * as the Go client does, until the deadline. A batch is re-sent after silence (3.2.1).
 */
final class Requester {
  private final Connection nc;
  private final Map<String, Waiting> waits = new ConcurrentHashMap<>();
  private final AtomicLong seq = new AtomicLong();
  private String inbox;
  private Dispatcher replies;
  private Dispatcher notices;

  Requester(Connection nc) {
    this.nc = nc;
  }

  /** Sends e to subject and returns the reply event, which must be of type want. */
  Event request(String subject, Event e, String want, Duration timeout) {
    return request(subject, e, want, timeout, null);
  }

  /** The same, a batch re-sent after silence as rs says (null or max 0: never). */
  Event request(String subject, Event e, String want, Duration timeout, Resend rs) {
    long deadline = System.nanoTime() + timeout.toNanos();
    for (long backoff = 10; ; backoff = Math.min(2 * backoff, 1000)) {
      Message resp = rs == null || rs.max() == 0 ? send(subject, e, deadline) : resend(subject, e, deadline, rs);
      Event re = Event.decode(resp);
      if (Codes.ERROR.equals(re.type)) {
        BusException be = errorOf(re);
        long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
        if (Codes.BUSY.equals(be.code()) && left > backoff) {
          sleep(backoff / 2 + ThreadLocalRandom.current().nextLong(backoff));
          continue;
        }
        throw be;
      }
      if (want != null && !want.equals(re.type)) {
        throw new BusException(Codes.INTERNAL, "expected " + want + ", got " + re.type);
      }
      return re;
    }
  }

  static BusException errorOf(Event re) {
    com.fasterxml.jackson.databind.JsonNode d = re.dataTree();
    String code = d.path("code").asText("internal");
    return new BusException(code, d.path("message").asText(""));
  }

  private Message send(String subject, Event e, long deadline) {
    return await(subject, start(subject, e, deadline), deadline);
  }

  /** A batch waiting for its reply: what its reply subject received, and when its window ends. */
  private record Waiting(String replyId, Duration afterNotice, BlockingQueue<Message> replies, AtomicLong quiet) {}

  /**
   * Publishes batch e and waits for its reply until deadline, listening on the reply subject and
   * on the reply subject + ".running" (3.2.1): when a window passes with neither the reply nor a
   * running notice of e (that type, replyid e.id), the same message is published again, at most
   * rs.max() times. A no-responders status on any copy fails the call `unavailable` (3.2.1), as Go's
   * and Python's clients do.
   */
  private Message resend(String subject, Event e, long deadline, Resend rs) {
    String reply = inbox() + "." + seq.incrementAndGet();
    Waiting w = new Waiting(e.id, rs.afterNotice(), new ArrayBlockingQueue<>(4), new AtomicLong(Resend.window(rs.first())));
    waits.put(reply, w);
    try {
      Message m = e.toMessage(subject, reply);
      nc.publish(m);
      for (int resent = 0; ; ) {
        long now = System.nanoTime();
        long quiet = w.quiet().get();
        if (now - deadline >= 0) {
          throw new BusException(Codes.TIMEOUT, "no reply on " + subject + " before the deadline");
        }
        if (resent < rs.max() && quiet - now <= 0) {
          w.quiet().set(Resend.window(rs.first()));
          nc.publish(m);
          resent++;
          continue;
        }
        long until = resent < rs.max() && quiet - deadline < 0 ? quiet : deadline;
        Message got = w.replies().poll(until - now, TimeUnit.NANOSECONDS);
        if (got != null && (!got.isStatusMessage() || got.getStatus().getCode() != 503)) {
          return got;
        }
        if (got != null) {
          throw new BusException(Codes.UNAVAILABLE, "no router serves " + subject + " (no responders)");
        }
      }
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      throw new BusException(Codes.INTERRUPTED, "interrupted while waiting on " + subject);
    } finally {
      waits.remove(reply);
    }
  }

  /**
   * The inbox of every batch this requester waits for, its two subscriptions made on first use:
   * replies on inbox.*, running notices on inbox.*.running with a dispatcher of their own whose
   * pending limits (1024 messages, 1 MiB) drop a flood of notices, never a reply (3.2.1).
   */
  private synchronized String inbox() {
    if (inbox == null) {
      inbox = nc.createInbox();
      replies = nc.createDispatcher(m -> {
        Waiting w = waits.get(m.getSubject());
        if (w != null) {
          w.replies().offer(m);
        }
      });
      replies.subscribe(inbox + ".*");
      notices = nc.createDispatcher(m -> {
        Waiting w = waits.get(m.getSubject().substring(0, m.getSubject().length() - ".running".length()));
        if (w != null && running(m, w.replyId())) {
          w.quiet().set(Resend.window(w.afterNotice()));
        }
      });
      notices.setPendingLimits(1024, 1 << 20);
      notices.subscribe(inbox + ".*.running");
    }
    return inbox;
  }

  /** Closes the batches' subscriptions, if made. */
  synchronized void close() {
    if (inbox != null && nc.getStatus() != Connection.Status.CLOSED) {
      nc.closeDispatcher(replies);
      nc.closeDispatcher(notices);
    }
    inbox = null;
  }

  /** Whether m is a running notice of the batch replyId (3.2.1); anything else does not count. */
  private static boolean running(Message m, String replyId) {
    try {
      Event n = Event.decode(m);
      return Codes.CALL_RUNNING.equals(n.type) && replyId.equals(n.replyid);
    } catch (RuntimeException ex) {
      return false;
    }
  }

  /** Sends e to subject without waiting: many requests in flight at once (a worker's beat, 7.1). */
  CompletableFuture<Message> start(String subject, Event e, long deadline) {
    long left = deadline - System.nanoTime();
    if (left <= 0) {
      throw new BusException(Codes.TIMEOUT, "no reply on " + subject + " before the deadline");
    }
    return nc.requestWithTimeout(e.toMessage(subject, null), Duration.ofNanos(left));
  }

  /** Waits for the reply of a request start sent, until deadline (System.nanoTime). */
  static Message await(String subject, CompletableFuture<Message> f, long deadline) {
    long left = Math.max(0, deadline - System.nanoTime());
    try {
      Message m = f.get(left + TimeUnit.MILLISECONDS.toNanos(500), TimeUnit.NANOSECONDS);
      if (m == null) {
        throw new BusException(Codes.TIMEOUT, "no reply on " + subject);
      }
      return m;
    } catch (CancellationException ce) {
      if (System.nanoTime() < deadline - TimeUnit.MILLISECONDS.toNanos(5)) {
        throw new BusException(Codes.UNAVAILABLE, "no router serves " + subject + " (no responders)");
      }
      throw new BusException(Codes.TIMEOUT, "no reply on " + subject + " before the deadline");
    } catch (TimeoutException te) {
      f.cancel(true);
      throw new BusException(Codes.TIMEOUT, "no reply on " + subject + " before the deadline");
    } catch (ExecutionException ee) {
      Throwable c = ee.getCause();
      String why = c == null ? ee.toString() : c.toString();
      if (why.contains("503") || why.toLowerCase(java.util.Locale.ROOT).contains("no responders")) {
        throw new BusException(Codes.UNAVAILABLE, "no router serves " + subject + " (no responders)");
      }
      if (c instanceof TimeoutException) {
        throw new BusException(Codes.TIMEOUT, "no reply on " + subject + " before the deadline");
      }
      throw new BusException(Codes.INTERNAL, subject + ": " + why, c);
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      f.cancel(true);
      throw new BusException(Codes.INTERRUPTED, "interrupted while waiting on " + subject);
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      throw new BusException(Codes.INTERRUPTED, "interrupted during a busy backoff");
    }
  }
}
