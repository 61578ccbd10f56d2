package io.toolbus.agentscope;

import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.model.ToolSchema;
import io.agentscope.core.tool.ToolValidator;
import io.toolbus.Json;
import io.toolbus.ToolsList;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * AgentScope Java's meta tool, reset_equipped_tools (shown when the agent is built with
 * enableMetaTool(true)), over the bus's groups: its description, schema and texts are
 * AgentScope's; a call becomes the bus's reset_tools with the same final set, so activation stays
 * the session's, shared by every router.
 */
final class MetaTool {
  static final String NAME = "reset_equipped_tools";
  static final String BUS_NAME = "reset_tools";

  private MetaTool() {}

  /** The meta groups of a listing, in the bus's order. */
  static List<ToolsList.GroupInfo> metaGroups(ToolsList l) {
    List<ToolsList.GroupInfo> out = new ArrayList<>();
    for (ToolsList.GroupInfo g : l.groups()) {
      if ("meta".equals(g.scope())) {
        out.add(g);
      }
    }
    return out;
  }

  static ToolSchema schema(ToolsList l) {
    List<ToolsList.GroupInfo> groups = metaGroups(l);
    return ToolSchema.builder().name(NAME).description(description(groups)).parameters(parameters(groups)).build();
  }

  static String description(List<ToolsList.GroupInfo> groups) {
    StringBuilder on = new StringBuilder("Activated tool groups:\n");
    StringBuilder off = new StringBuilder("Inactive tool groups:\n");
    for (ToolsList.GroupInfo g : groups) {
      (g.active() ? on : off).append(String.format("- %s: %s\n", g.name(), g.description()));
    }
    if (groups.stream().noneMatch(ToolsList.GroupInfo::active)) {
      on.append("No tool groups are currently activated.\n");
    }
    if (groups.stream().allMatch(ToolsList.GroupInfo::active)) {
      off.append("No tool groups are currently inactive.\n");
    }
    return "Reset your equipped tools based on your current task requirements. "
        + "These tools are organized into different groups, and you can "
        + "activate/deactivate them by specifying which groups to keep "
        + "active.\n\n"
        + "**Important: The input list is the FINAL set of active tool "
        + "groups, not incremental changes.** Any group not included in "
        + "the list will be deactivated, regardless of its previous "
        + "state.\n\n"
        + "**Best practice**: Activate only what you need for the current "
        + "task, and promptly deactivate groups as soon as they are no "
        + "longer needed to conserve context space.\n\n"
        + on + off;
  }

  static Map<String, Object> parameters(List<ToolsList.GroupInfo> groups) {
    Map<String, Object> items = new HashMap<>();
    items.put("type", "string");
    if (!groups.isEmpty()) {
      items.put("enum", groups.stream().map(ToolsList.GroupInfo::name).toList());
    }
    Map<String, Object> p = new HashMap<>();
    p.put("type", "array");
    p.put("items", items);
    p.put("description", "The FINAL list of tool group names to keep active. "
        + "Groups NOT in this list will be deactivated. "
        + "Pass an empty list to deactivate all groups.");
    Map<String, Object> s = new HashMap<>();
    s.put("type", "object");
    s.put("properties", Map.of("to_activate", p));
    s.put("required", List.of("to_activate"));
    return s;
  }

  /**
   * Checks a reset_equipped_tools call as AgentScope would: the error block when it fails, else
   * null (then {@link #busInput} is what the bus runs).
   */
  static ToolResultBlock check(String id, String input, Map<String, Object> in, ToolsList l) {
    String why = ToolValidator.validateInput(input, parameters(metaGroups(l)));
    if (why != null) {
      return Results.error(id, NAME, String.format(
          "Parameter validation failed for tool '%s': %s\nPlease correct the parameters and try again.", NAME, why));
    }
    Object v = in.get("to_activate");
    if (!(v instanceof List<?> names)) {
      return Results.error(id, NAME, "Missing required parameter: to_activate");
    }
    for (Object n : names) {
      ToolsList.GroupInfo g = l.groups().stream().filter(x -> x.name().equals(n)).findFirst().orElse(null);
      if (g == null || "basic".equals(g.scope())) {
        return Results.error(id, NAME, "Tool group '" + n + "' does not exist");
      }
      if (!"meta".equals(g.scope())) {
        return Results.text(id, NAME, "Error: Group '" + n + "' is not manageable by this tool.");
      }
    }
    return null;
  }

  /** The bus's reset_tools input for the same final set. */
  static Map<String, Object> busInput(Map<String, Object> in) {
    Map<String, Object> out = new LinkedHashMap<>();
    for (Object n : (List<?>) in.get("to_activate")) {
      out.put(String.valueOf(n), true);
    }
    return out;
  }

  /** AgentScope's reply text for the final set, with the groups' descriptions as instructions. */
  static String reply(Map<String, Object> in, ToolsList l) {
    List<?> names = (List<?>) in.get("to_activate");
    if (names.isEmpty()) {
      return "All tool groups are currently deactivated.";
    }
    StringBuilder b = new StringBuilder("The currently activated tool group(s): ");
    b.append(String.join(", ", names.stream().map(String::valueOf).toList())).append(".\n");
    List<ToolsList.GroupInfo> gs = new ArrayList<>();
    for (Object n : names) {
      l.groups().stream().filter(x -> x.name().equals(n)).findFirst().ifPresent(gs::add);
    }
    if (gs.stream().anyMatch(g -> g.description() != null && !g.description().isEmpty())) {
      b.append("<tool-instructions>\n");
      for (ToolsList.GroupInfo g : gs) {
        if (g.description() != null && !g.description().isEmpty()) {
          b.append(String.format("<group name=\"%s\">%s</group>\n", g.name(), g.description()));
        }
      }
      b.append("</tool-instructions>");
    }
    return b.toString();
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> parse(String json) {
    try {
      return Json.MAPPER.readValue(json, Map.class);
    } catch (Exception e) {
      return Map.of();
    }
  }
}
