package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/** The data of io.toolbus.tools.list (docs/protocol.md 4.1): tools in the format asked. */
@JsonIgnoreProperties(ignoreUnknown = true)
public record ToolsList(
    List<JsonNode> tools,
    List<GroupInfo> groups,
    @JsonProperty("skills_prompt") String skillsPrompt,
    Long sessionrev) {
  public ToolsList {
    tools = tools == null ? List.of() : tools;
    groups = groups == null ? List.of() : groups;
  }

  /** A group as listed for a session. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public record GroupInfo(String name, String description, String scope, boolean active) {}
}
