package io.toolbus;

import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import io.nats.client.Subscription;
import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
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
  private Dispatcher notices;

  Requester(Connection nc) {
    this.nc = nc;
  }

  /** Sends e to subject and returns the reply event, which must be of type want. */
  Event request(String subject, Event e, String want, Duration timeout) {
    return request(subject, e, want, timeout, null);
  }

  /** The same, a batch re-sent after silence as rs says (null: never). */
  Event request(String subject, Event e, String want, Duration timeout, Resend rs) {
    long deadline = System.nanoTime() + timeout.toNanos();
    for (long backoff = 10; ; backoff = Math.min(2 * backoff, 1000)) {
      Message resp = rs == null ? send(subject, e, deadline) : resend(subject, e, deadline, rs);
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

  /**
   * Publishes batch e and waits for its reply until deadline, listening on the reply subject and
   * on the reply subject + ".running" (3.2.1): when a window passes with neither the reply nor a
   * running notice of e (that type, replyid e.id), the same message is published again, at most
   * rs.max() times. A no-responders status fails the first send only; a re-send's waits on.
   */
  private Message resend(String subject, Event e, long deadline, Resend rs) {
    String reply = nc.createInbox();
    Subscription sub = nc.subscribe(reply);
    AtomicLong quiet = new AtomicLong(); // the end of the window (System.nanoTime); a notice moves it
    Dispatcher d = notices();
    Subscription heard = d.subscribe(reply + ".running", n -> {
      if (running(n, e.id)) {
        quiet.set(Resend.window(rs.afterNotice()));
      }
    });
    try {
      Message m = e.toMessage(subject, reply);
      quiet.set(Resend.window(rs.first()));
      nc.publish(m);
      for (int resent = 0; ; ) {
        long now = System.nanoTime();
        if (now - deadline >= 0) {
          throw new BusException(Codes.TIMEOUT, "no reply on " + subject + " before the deadline");
        }
        long until = resent < rs.max() && quiet.get() - deadline < 0 ? quiet.get() : deadline;
        if (until - now <= 0) {
          quiet.set(Resend.window(rs.first()));
          nc.publish(m);
          resent++;
          continue;
        }
        Message got = sub.nextMessage(Duration.ofNanos(Math.max(until - now, 1_000_000)));
        if (got != null && (!got.isStatusMessage() || got.getStatus().getCode() != 503)) {
          return got;
        }
        if (got != null && resent == 0) {
          throw new BusException(Codes.UNAVAILABLE, "no router serves " + subject + " (no responders)");
        }
      }
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      throw new BusException(Codes.INTERRUPTED, "interrupted while waiting on " + subject);
    } finally {
      if (d.isActive()) {
        d.unsubscribe(heard);
      }
      sub.unsubscribe();
    }
  }

  /**
   * The dispatcher of the running notices of every batch this requester waits for, made on first
   * use: a flood of notices is dropped past 1024 messages or 1 MiB, never a reply (3.2.1).
   */
  private synchronized Dispatcher notices() {
    if (notices == null) {
      notices = nc.createDispatcher();
      notices.setPendingLimits(1024, 1 << 20);
    }
    return notices;
  }

  /** Closes the notices' dispatcher, if made. */
  synchronized void close() {
    if (notices != null && nc.getStatus() != Connection.Status.CLOSED) {
      nc.closeDispatcher(notices);
    }
    notices = null;
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
