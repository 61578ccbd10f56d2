package io.toolbus;

import io.nats.client.Connection;
import io.nats.client.Message;
import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Sends request events and reads their replies (docs/protocol.md 1): an io.toolbus.error reply
 * becomes a {@link BusException}; a busy reply is sent again after a growing, jittered backoff,
 * as the Go client does, until the deadline.
 */
final class Requester {
  private final Connection nc;

  Requester(Connection nc) {
    this.nc = nc;
  }

  /** Sends e to subject and returns the reply event, which must be of type want. */
  Event request(String subject, Event e, String want, Duration timeout) {
    long deadline = System.nanoTime() + timeout.toNanos();
    for (long backoff = 10; ; backoff = Math.min(2 * backoff, 1000)) {
      Message resp = send(subject, e, deadline);
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
