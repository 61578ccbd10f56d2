package io.toolbus.agentscope;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.agentscope.core.message.ContentBlock;
import io.agentscope.core.message.TextBlock;
import io.toolbus.Block;
import java.util.List;
import org.junit.jupiter.api.Test;

/** A stored output reaches the agent as the Go client's text: named once, never as raw JSON. */
class BlocksTest {
  @Test
  void storedOutputsAreTheGoClientsLines() {
    String named = "nats-object://toolbus_outputs/s.r.c.t.0#sha256=" + "0f".repeat(32);
    Block unnamed = Block.url("image/png", "nats-object://toolbus_outputs/s.r.c.t.1#sha256=" + "ab".repeat(32), 3L);
    List<ContentBlock> got = Blocks.toAgentScope(List.of(
        Block.text("head\n[… 1 bytes left out …]\ntail\n[... It is stored as " + named + "; read_output reads any part of it.]"),
        Block.url("text/plain; charset=utf-8", named, 10L), unnamed));
    assertEquals(2, got.size(), got.toString());
    assertEquals(Block.storedText(unnamed), ((TextBlock) got.get(1)).getText());
  }
}
