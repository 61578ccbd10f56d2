package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/** A call waiting for an answer on subject (docs/protocol.md 3.2); kind external|confirm|queued. */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Parked(
    String id,
    String name,
    JsonNode input,
    String kind,
    String subject,
    @JsonProperty("suggested_rules") List<Rule> suggestedRules) {

  /** The tool name as the answer subject names it (P.answer.<tool>). */
  public String tool() {
    return name;
  }
}
