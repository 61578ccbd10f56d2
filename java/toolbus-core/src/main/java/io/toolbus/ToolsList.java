package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The data of io.toolbus.tools.list (docs/protocol.md 4.1): tools in the format asked. With a
 * deferred listing, {@code deferred} maps each deferred tool to its group.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record ToolsList(
    List<JsonNode> tools,
    List<GroupInfo> groups,
    @JsonProperty("skills_prompt") String skillsPrompt,
    Long sessionrev,
    Map<String, String> deferred) {
  public ToolsList {
    tools = tools == null ? List.of() : tools;
    groups = groups == null ? List.of() : groups;
    deferred = deferred == null ? Map.of() : Map.copyOf(deferred);
  }

  /** A listing without deferred tools. */
  public ToolsList(List<JsonNode> tools, List<GroupInfo> groups, String skillsPrompt, Long sessionrev) {
    this(tools, groups, skillsPrompt, sessionrev, null);
  }

  /** A group as listed for a session. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public record GroupInfo(String name, String description, String scope, boolean active) {}

  /**
   * The final set of meta groups after the provider's tool search loaded {@code loadedGroups}
   * (OpenAI namespaces) and {@code loadedTools} (tools by name), in order: the active meta groups,
   * then the loaded groups (docs/protocol.md 4.2, "Loads through the provider"). A group or tool
   * this listing does not offer deferred is ignored, as in Go's client.Turn. Send it with {@link
   * #resetInput} as a reset_tools call ahead of the model's calls.
   */
  public List<String> afterLoads(List<String> loadedGroups, List<String> loadedTools) {
    Set<String> offered = new HashSet<>(deferred.values());
    List<String> out = new ArrayList<>();
    for (GroupInfo g : groups) {
      if ("meta".equals(g.scope()) && g.active()) {
        out.add(g.name());
      }
    }
    List<String> loads = new ArrayList<>();
    for (String g : loadedGroups) {
      loads.add(offered.contains(g) ? g : null);
    }
    for (String t : loadedTools) {
      loads.add(deferred.get(t));
    }
    for (String g : loads) {
      if (g != null && !out.contains(g)) {
        out.add(g);
      }
    }
    return out;
  }

  /** The reset_tools input that activates exactly {@code groups}, in order (docs/protocol.md 4.2). */
  public static Map<String, Boolean> resetInput(List<String> groups) {
    Map<String, Boolean> in = new LinkedHashMap<>();
    for (String g : groups) {
      in.put(g, true);
    }
    return in;
  }
}
