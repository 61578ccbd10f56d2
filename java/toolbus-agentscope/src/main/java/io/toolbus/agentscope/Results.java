package io.toolbus.agentscope;

import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolResultState;
import io.agentscope.core.tool.ToolValidator;
import io.toolbus.Codes;
import io.toolbus.Result;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Bus results as AgentScope's ToolResultBlocks, with the texts AgentScope's in-process Toolkit
 * shows for the same failures: an unknown tool and an input that fails its schema (validated
 * again with AgentScope's own ToolValidator, so the wording is AgentScope's). Every other text is
 * the bus's (docs/agentscope.md, Java).
 */
final class Results {
  private Results() {}

  /** r as AgentScope shows it; input is the call's JSON text, schema its tool's parameters. */
  static ToolResultBlock toAgentScope(Result r, String input, Map<String, Object> schema) {
    String code = r.code();
    if (Codes.UNKNOWN_TOOL.equals(code)) {
      return withId(r, ToolResultBlock.error("Tool not found: " + r.name()), code);
    }
    if (Codes.INVALID_INPUT.equals(code) && schema != null && input != null) {
      String why = ToolValidator.validateInput(input, schema);
      if (why != null) {
        return withId(r, ToolResultBlock.error(String.format(
            "Parameter validation failed for tool '%s': %s\nPlease correct the parameters and try again.", r.name(), why)), code);
      }
    }
    return plain(r);
  }

  /** r with the bus's own texts. */
  static ToolResultBlock plain(Result r) {
    return new ToolResultBlock(r.id(), r.name(), Blocks.toAgentScope(r.output()), meta(r.code()), state(r.state()));
  }

  private static ToolResultBlock withId(Result r, ToolResultBlock b, String code) {
    return new ToolResultBlock(r.id(), r.name(), b.getOutput(), meta(code), ToolResultState.ERROR);
  }

  static Map<String, Object> meta(String code) {
    Map<String, Object> m = new LinkedHashMap<>();
    if (code != null) {
      m.put("toolbus_code", code);
    }
    return m;
  }

  static ToolResultState state(String s) {
    return switch (s) {
      case Codes.STATE_SUCCESS -> ToolResultState.SUCCESS;
      case Codes.STATE_DENIED -> ToolResultState.DENIED;
      case Codes.STATE_INTERRUPTED -> ToolResultState.INTERRUPTED;
      default -> ToolResultState.ERROR;
    };
  }

  /** An error block for call id of tool name, with AgentScope's "Error: " prefix. */
  static ToolResultBlock error(String id, String name, String msg) {
    ToolResultBlock b = ToolResultBlock.error(msg);
    return new ToolResultBlock(id, name, b.getOutput(), Map.of(), ToolResultState.ERROR);
  }

  /** A text block for call id of tool name. */
  static ToolResultBlock text(String id, String name, String text) {
    return new ToolResultBlock(id, name, List.of(io.agentscope.core.message.TextBlock.builder().text(text).build()),
        Map.of(), ToolResultState.SUCCESS);
  }
}
