package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/**
 * The data of io.toolbus.exec.result (docs/protocol.md 5.2). {@code cancel} (1.30), on an
 * interrupted result only, is the id of the cancel event the worker ended the call for: the
 * router holds the batch's next run until it has handled that cancel too (3.5). The worker sets
 * it; a tool's own result leaves it null.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record ExecResult(
    String state, List<Block> output, JsonNode metadata, @JsonProperty("state_patch") JsonNode statePatch,
    String cancel) {

  /** A result naming no cancel: the record's shape before 1.30. */
  public ExecResult(String state, List<Block> output, JsonNode metadata, JsonNode statePatch) {
    this(state, output, metadata, statePatch, null);
  }

  public static ExecResult success(List<Block> output) {
    return new ExecResult(Codes.STATE_SUCCESS, output, null, null);
  }

  public static ExecResult error(String text) {
    return new ExecResult(Codes.STATE_ERROR, List.of(Block.text(text)), null, null);
  }

  public static ExecResult interrupted() {
    return interrupted(null);
  }

  /** The interrupted result of a call ended for cancel event id (null: none named, 3.5). */
  static ExecResult interrupted(String id) {
    return new ExecResult(Codes.STATE_INTERRUPTED, List.of(Block.text(Codes.INTERRUPTED_TEXT)), null, null, id);
  }

  public ExecResult withMetadata(Object m) {
    return new ExecResult(state, output, m == null ? null : Json.tree(m), statePatch, cancel);
  }

  ExecResult withOutput(List<Block> out) {
    return new ExecResult(state, out, metadata, statePatch, cancel);
  }

  ExecResult withStatePatch(JsonNode p) {
    return new ExecResult(state, output, metadata, p, cancel);
  }
}
