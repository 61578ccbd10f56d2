package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/** The outcome of one call (docs/protocol.md 3.3). */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Result(
    String id, String name, String state, List<Block> output, Error error, JsonNode metadata, TaskHandle task) {

  /** The handle of a result in state background: the task the call goes on as (5.10). */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public record TaskHandle(String id, String state, String subject) {}

  /** The machine-readable part of an error result. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public record Error(
      String code,
      String message,
      List<Detail> details,
      @JsonProperty("retry_after_ms") Long retryAfterMs) {}

  /** One problem of an invalid input. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public record Detail(String path, String message) {}

  /** The text of the output's text blocks, joined by newlines. */
  public String text() {
    return Block.joinText(output);
  }

  /** The error code, or null for a success. */
  public String code() {
    return error == null ? null : error.code();
  }

  public boolean ok() {
    return Codes.STATE_SUCCESS.equals(state);
  }
}
