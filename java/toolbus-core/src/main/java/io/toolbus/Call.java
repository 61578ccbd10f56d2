package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.databind.JsonNode;

/**
 * One tool call of a model turn; input is an object, or a string holding one. background asks
 * that the call go on as a background task past its timeout (docs/protocol.md 3.1, 5.10).
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Call(String id, String name, JsonNode input,
    @JsonInclude(JsonInclude.Include.NON_DEFAULT) boolean background) {
  public Call(String id, String name, JsonNode input) {
    this(id, name, input, false);
  }

  /** A call with input given as any value Jackson encodes (a Map, a JsonNode, a JSON string). */
  public static Call of(String id, String name, Object input) {
    return new Call(id, name, input == null ? null : Json.tree(input));
  }

  /** This call, asking to go on as a background task past its timeout. */
  public Call inBackground() {
    return new Call(id, name, input, true);
  }
}
