package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/**
 * A stored text's inline preview is the Go offloader's headTail byte for byte: the cases and
 * Go's texts are bus/offload/testdata/headtail.json (also read by python/tests/test_wire.py).
 */
class OffloaderTest {
  @Test
  void storedTextPreviewMatchesGo() throws Exception {
    JsonNode cases = new ObjectMapper().readTree(Router.root().resolve("bus/offload/testdata/headtail.json").toFile());
    assertTrue(cases.size() >= 5, "headtail.json has " + cases.size() + " cases");
    for (JsonNode c : cases) {
      String got = Offloader.headTail(c.get("text").asText(), c.get("keep").asInt(), c.get("url").asText());
      assertArrayEquals(c.get("want").asText().getBytes(StandardCharsets.UTF_8), got.getBytes(StandardCharsets.UTF_8),
          c.get("name").asText() + ": got " + got);
    }
  }

  @Test
  void storedOutputLineMatchesGo() throws Exception {
    // client/testdata/model: the Go client's tool-result text for a stored image its text does not name.
    String golden = java.nio.file.Files.readString(Router.root().resolve("client/testdata/model/anthropic.out.json"));
    Block stored = Block.url("image/png", "nats-object://toolbus_outputs/s1.t.c.x.1#sha256=" + "ab".repeat(32), 3145728L);
    String line = new ObjectMapper().writeValueAsString(Block.storedText(stored)).replace("<", "\\u003c").replace(">", "\\u003e");
    assertTrue(golden.contains(line.substring(1, line.length() - 1)), "not in the golden file: " + line);
  }
}
