package io.toolbus;

/** A permission rule (docs/protocol.md 6.4): tool, optional pattern, behavior allow|deny|ask. */
public record Rule(String tool, String pattern, String behavior) {
  public static Rule allow(String tool) {
    return new Rule(tool, null, null);
  }
}
