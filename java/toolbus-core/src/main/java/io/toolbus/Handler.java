package io.toolbus;

/**
 * Runs one call of a tool. The return value becomes the output: a String is one text block; a
 * {@link Block} or a List of them is used as is; an {@link ExecResult} passes through; null is
 * an empty success; anything else is encoded as JSON in a text block. A thrown exception is an
 * error result with text {@code Error: <message>}.
 */
@FunctionalInterface
public interface Handler {
  Object handle(ToolCall call) throws Exception;

  /** A typed tool: the input is decoded into In before it runs. */
  @FunctionalInterface
  interface Typed<I> {
    Object handle(ToolCall call, I input) throws Exception;
  }
}
