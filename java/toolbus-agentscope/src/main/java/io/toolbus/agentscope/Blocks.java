package io.toolbus.agentscope;

import io.agentscope.core.message.Base64Source;
import io.agentscope.core.message.ContentBlock;
import io.agentscope.core.message.ImageBlock;
import io.agentscope.core.message.TextBlock;
import io.agentscope.core.message.URLSource;
import io.toolbus.Block;
import io.toolbus.Json;
import java.util.ArrayList;
import java.util.List;

/** Converts output blocks between toolbus (docs/protocol.md 3.3) and AgentScope content blocks. */
final class Blocks {
  private Blocks() {}

  /** AgentScope content as toolbus blocks: text as text, anything else as its JSON text. */
  static List<Block> toBus(List<ContentBlock> content) {
    List<Block> out = new ArrayList<>();
    if (content == null) {
      return out;
    }
    for (ContentBlock c : content) {
      if (c instanceof TextBlock t) {
        out.add(Block.text(t.getText()));
      } else if (c instanceof ImageBlock img && img.getSource() instanceof Base64Source b) {
        out.add(new Block("data", null, b.getMediaType(), b.getData(), null, null, null, null, null, null, null));
      } else if (c instanceof ImageBlock img && img.getSource() instanceof URLSource u) {
        out.add(Block.url("image/*", u.getUrl(), null));
      } else {
        out.add(Block.text(Json.text(c)));
      }
    }
    return out;
  }

  /**
   * Whether AgentScope may be handed a url of the bus as a URLSource: http(s) only. Its media
   * helper (MediaUtils, what formatters use) reads a path or a file: url from the agent's own disk
   * into the model's request; any other url is shown as its block's JSON text (docs/security.md).
   */
  static boolean followed(String url) {
    String u = url == null ? "" : url.toLowerCase(java.util.Locale.ROOT);
    return u.startsWith("https://") || u.startsWith("http://");
  }

  /** toolbus blocks as AgentScope content: text as TextBlock, data as DataBlock-like text. */
  static List<ContentBlock> toAgentScope(List<Block> blocks) {
    List<ContentBlock> out = new ArrayList<>();
    if (blocks == null) {
      return out;
    }
    StringBuilder said = new StringBuilder();
    for (Block b : blocks) {
      if ("text".equals(b.type())) {
        out.add(TextBlock.builder().text(b.text()).build());
        said.append(b.text()).append('\n');
      } else if (b.isStoredOutput()) {
        if (said.indexOf(b.url()) < 0) { // the sender's preview already names it (5.9), as the Go client
          String line = Block.storedText(b);
          out.add(TextBlock.builder().text(line).build());
          said.append(line).append('\n');
        }
      } else if (b.data() != null && b.mediaType() != null && b.mediaType().startsWith("image/")) {
        out.add(ImageBlock.builder().source(Base64Source.builder().mediaType(b.mediaType()).data(b.data()).build()).build());
      } else if (followed(b.url()) && b.mediaType() != null && b.mediaType().startsWith("image/")) {
        out.add(ImageBlock.builder().source(URLSource.builder().url(b.url()).build()).build());
      } else {
        out.add(TextBlock.builder().text(Json.text(b)).build());
      }
    }
    return out;
  }
}
