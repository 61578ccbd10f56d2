package io.toolbus;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Re-sending a batch after silence (docs/protocol.md 3.2.1, 1.25): when {@code first} passes
 * after a send, or {@code afterNotice} after a router's running notice of the batch, with
 * neither its reply nor a notice, the client publishes the same message again, at most
 * {@code max} times; each window gets up to +20 % random jitter. The call's timeout is unchanged.
 */
public record Resend(Duration first, Duration afterNotice, int max) {
  public Resend {
    if (first == null || afterNotice == null || first.toNanos() <= 0 || afterNotice.toNanos() <= 0 || max < 0) {
      throw new IllegalArgumentException("resend: windows must be positive and max at least 0");
    }
  }

  /** 6 s after a send, 15 s after a notice, at most 3 re-sends (section 13). */
  public static Resend defaults() {
    return new Resend(Duration.ofSeconds(6), Duration.ofSeconds(15), 3);
  }

  /** No re-sends: a batch waits for its reply until its timeout, as under 1.24. */
  public static Resend off() {
    return new Resend(Duration.ofSeconds(6), Duration.ofSeconds(15), 0);
  }

  /** The deadline (System.nanoTime) of a window w starting now, with up to +20 % jitter. */
  static long window(Duration w) {
    long n = w.toNanos();
    return System.nanoTime() + n + ThreadLocalRandom.current().nextLong(n / 5 + 1);
  }
}
