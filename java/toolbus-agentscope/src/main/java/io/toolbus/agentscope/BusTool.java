package io.toolbus.agentscope;

import com.fasterxml.jackson.databind.JsonNode;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.tool.ToolBase;
import io.agentscope.core.tool.ToolCallParam;
import io.toolbus.Json;
import java.util.Map;
import reactor.core.publisher.Mono;

/**
 * A bus tool as AgentScope sees it: its name, description, schema and flags from the bus's
 * listing. Its permission check is PASSTHROUGH: the bus's permission step decides (a call that
 * needs a confirmation parks on the bus). Calls run through the owning {@link BusToolkit}.
 */
final class BusTool extends ToolBase {
  private final BusToolkit kit;

  BusTool(BusToolkit kit, JsonNode def) {
    super(def.path("name").asText(), def.path("description").asText(""), schema(def),
        def.path("read_only").asBoolean(false), def.path("concurrency_safe").asBoolean(true),
        false, null, false, def.path("state_injected").asBoolean(false));
    this.kit = kit;
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Object> schema(JsonNode def) {
    JsonNode s = def.has("input_schema") ? def.get("input_schema") : def.path("parameters");
    return Json.MAPPER.convertValue(s.isMissingNode() ? Json.emptyObject() : s, Map.class);
  }

  @Override
  public Mono<ToolResultBlock> callAsync(ToolCallParam param) {
    return kit.callTools(java.util.List.of(param.getToolUseBlock()), null, param.getAgent(), param.getRuntimeContext())
        .map(l -> l.get(0));
  }
}
