package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/** The data of io.toolbus.exec.result (docs/protocol.md 5.2). */
@JsonIgnoreProperties(ignoreUnknown = true)
public record ExecResult(
    String state, List<Block> output, JsonNode metadata, @JsonProperty("state_patch") JsonNode statePatch) {

  public static ExecResult success(List<Block> output) {
    return new ExecResult(Codes.STATE_SUCCESS, output, null, null);
  }

  public static ExecResult error(String text) {
    return new ExecResult(Codes.STATE_ERROR, List.of(Block.text(text)), null, null);
  }

  public static ExecResult interrupted() {
    return new ExecResult(Codes.STATE_INTERRUPTED, List.of(Block.text(Codes.INTERRUPTED_TEXT)), null, null);
  }

  public ExecResult withMetadata(Object m) {
    return new ExecResult(state, output, m == null ? null : Json.tree(m), statePatch);
  }

  ExecResult withOutput(List<Block> out) {
    return new ExecResult(state, out, metadata, statePatch);
  }

  ExecResult withStatePatch(JsonNode p) {
    return new ExecResult(state, output, metadata, p);
  }
}
