package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.nats.client.Connection;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
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

  /** Session 42: eight puts at once share one window of two chunks and every output reads back whole; the room is all back after. */
  @Test
  void putsShareTheWindow() throws Exception {
    Router router = Router.shared();
    String session = Router.session();
    ExecutorService pool = Executors.newFixedThreadPool(8);
    try (Connection nc = router.connect()) {
      Offloader off = new Offloader(nc, "toolbus_outputs", 1000, 0, 2 * Offloader.CHUNK);
      List<Future<List<Block>>> puts = new ArrayList<>();
      List<String> texts = new ArrayList<>();
      for (int i = 0; i < 8; i++) {
        String text = String.valueOf(i).repeat((600 << 10) + i);
        String key = session + ".r.c" + i;
        texts.add(text);
        puts.add(pool.submit(() -> off.fit(key, List.of(Block.text(text)), 0, false)));
      }
      ToolbusClient c = ToolbusClient.builder(nc).build();
      for (int i = 0; i < 8; i++) {
        List<Block> out = puts.get(i).get();
        assertEquals(2, out.size());
        assertArrayEquals(texts.get(i).getBytes(StandardCharsets.UTF_8), c.fetch(session, out.get(1).url()).bytes(), "output " + i);
      }
      assertEquals(2, off.room.availablePermits());
    } finally {
      pool.shutdownNow();
    }
  }

  /** A put that fails (no store takes its chunks) gives its room back: a leaked permit would stall every later put. */
  @Test
  void failedPutFreesItsRoom() throws Exception {
    try (Connection nc = Router.shared().connect()) {
      Offloader off = new Offloader(nc, "missing_outputs", 1000, 0, Offloader.CHUNK);
      for (int i = 0; i < 3; i++) {
        assertThrows(IOException.class, () -> off.fit("s.r.c", List.of(Block.text("z".repeat(3 * Offloader.CHUNK))), 0, false));
        assertEquals(1, off.room.availablePermits());
      }
    }
  }
}
