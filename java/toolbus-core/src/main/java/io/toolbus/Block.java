package io.toolbus;

import com.fasterxml.jackson.annotation.JsonProperty;
import java.util.Base64;
import java.util.List;

/**
 * One piece of output the model reads (docs/protocol.md 3.3): a text block, or a data block with
 * exactly one of {@code data} (base64) and {@code url}. Decoded strictly.
 */
public record Block(
    String type,
    String text,
    @JsonProperty("media_type") String mediaType,
    String data,
    String url,
    Long size,
    String uri,
    String name,
    String title,
    String description,
    Annotations annotations) {

  /** Content annotations: audience, priority 0..1, last_modified. */
  public record Annotations(
      List<String> audience, Double priority, @JsonProperty("last_modified") String lastModified) {}

  /** A text block. */
  public static Block text(String s) {
    return new Block("text", s == null ? "" : s, null, null, null, null, null, null, null, null, null);
  }

  /** A data block holding bytes (base64). */
  public static Block data(String mediaType, byte[] bytes) {
    return new Block("data", null, mediaType, Base64.getEncoder().encodeToString(bytes), null, null, null, null, null, null, null);
  }

  /** A data block referring to url. */
  public static Block url(String mediaType, String url, Long size) {
    return new Block("data", null, mediaType, null, url, size, null, null, null, null, null);
  }

  /** Reports whether this is a stored output's reference (docs/protocol.md 5.9). */
  public boolean isStoredOutput() {
    return "data".equals(type) && url != null && url.startsWith("nats-object://");
  }

  /**
   * The line a model reads for a stored output its result's text does not name, as the Go
   * client's (client/model.go storedText): the reference, media type, size and digest, and how to
   * read a part of it with read_output (docs/protocol.md 11).
   */
  public static String storedText(Block b) {
    String url = b.url() == null ? "" : b.url();
    int at = url.indexOf("#sha256=");
    String digest = at < 0 ? "" : ", sha256 " + url.substring(at + "#sha256=".length());
    return "[Stored output " + url + " (" + (b.mediaType() == null ? "" : b.mediaType()) + ", " + (b.size() == null ? 0 : b.size())
        + " bytes" + digest + "), too large to show here: read any part of it with read_output ({\"ref\": that URL, \"offset\": <byte> or "
        + "\"line\": <n>, \"limit\": <n>}).]";
  }

  /** Checks the block's shape; returns why it is malformed, or null. */
  public String problem() {
    if ("text".equals(type)) {
      return text == null ? "a text block needs text" : null;
    }
    if (!"data".equals(type)) {
      return "unknown block type " + Ids.quote(type);
    }
    if (mediaType == null || mediaType.isEmpty()) {
      return "a data block needs media_type";
    }
    if ((data == null || data.isEmpty()) == (url == null || url.isEmpty())) {
      return "a data block needs exactly one of data and url";
    }
    return null;
  }

  /** The text of every text block of out, joined by newlines. */
  public static String joinText(List<Block> out) {
    StringBuilder b = new StringBuilder();
    if (out != null) {
      for (Block x : out) {
        if ("text".equals(x.type())) {
          if (b.length() > 0) {
            b.append('\n');
          }
          b.append(x.text());
        }
      }
    }
    return b.toString();
  }
}
