package io.toolbus;

/** Answers one exec request: over core request/reply, or through the work queue (5.8). */
interface Replier {
  /** The call's result. */
  void result(Event out);

  /** The request is malformed: it never runs. */
  void refuse(BusException be);

  /** Cut off by the drain's deadline: no answer. */
  void drop();

  /** The exec's reply subject, where its router takes progress if it says so (5.3, 1.18); null: none (a durable call). */
  default String replyTo() {
    return null;
  }
}
