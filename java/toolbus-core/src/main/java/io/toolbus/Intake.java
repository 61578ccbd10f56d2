package io.toolbus;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;

/**
 * The calls a worker takes: its slots (the concurrency bound), the threads that run calls, and
 * the count of calls accepted and not yet answered, which a drain waits for.
 */
final class Intake {
  private final Semaphore slots;
  private final ExecutorService pool;
  private final CallTable calls;
  private int accepted;
  private volatile boolean cut;

  Intake(int maxConcurrent, ThreadFactory tf, CallTable calls) {
    this.slots = new Semaphore(maxConcurrent);
    this.pool = Executors.newCachedThreadPool(tf);
    this.calls = calls;
  }

  /** Marks the drain's deadline passed: calls that get a slot from now on never start. */
  void cutOff() {
    cut = true;
  }

  boolean isCutOff() {
    return cut;
  }

  Semaphore slots() {
    return slots;
  }

  ExecutorService pool() {
    return pool;
  }

  /** Counts a call taken, listed in heartbeats from now until release; returns its key. */
  String accept(Worker.Tool t, Executor.Checked ch) {
    synchronized (this) {
      accepted++;
    }
    if (ch.err() == null) {
      String key = Ids.callKey(ch.e().sessionid, ch.e().replyid, ch.data().path("call").path("id").asText());
      calls.queue(key, t.def().name());
      return key;
    }
    return null;
  }

  /** Ends what accept began; frees the call's slot when it held one. */
  void release(String key, boolean slot) {
    if (slot) {
      slots.release();
    }
    if (key != null) {
      calls.unqueue(key);
    }
    synchronized (this) {
      accepted--;
      notifyAll();
    }
  }

  /** Waits until no call is accepted or the deadline (System.nanoTime) passes; returns how many are left. */
  synchronized int awaitIdle(long deadline) throws InterruptedException {
    for (long left = deadline - System.nanoTime(); accepted > 0 && left > 0; left = deadline - System.nanoTime()) {
      wait(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
    }
    return accepted;
  }
}
