package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.databind.JsonNode;

/** One tool call of a model turn; input is an object, or a string holding one. */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Call(String id, String name, JsonNode input) {
  /** A call with input given as any value Jackson encodes (a Map, a JsonNode, a JSON string). */
  public static Call of(String id, String name, Object input) {
    return new Call(id, name, input == null ? null : Json.tree(input));
  }
}
