package io.toolbus.agentscope;

import io.agentscope.core.message.ContentBlock;
import io.agentscope.core.message.Msg;
import io.agentscope.core.message.TextBlock;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolUseBlock;
import io.agentscope.core.model.ChatModelBase;
import io.agentscope.core.model.ChatResponse;
import io.agentscope.core.model.GenerateOptions;
import io.agentscope.core.model.ToolSchema;
import io.toolbus.Json;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import reactor.core.publisher.Flux;

/**
 * A model that makes no network call: it answers each request with the next scripted turn (tool
 * calls, or a text), and records what it was shown: the tools' schemas and every tool result.
 */
final class ScriptedModel extends ChatModelBase {
  private final List<List<ContentBlock>> turns;
  private int next;
  /** Per request: tool name -> its parameters, as JSON text. */
  final List<Map<String, String>> toolsSeen = new ArrayList<>();
  /** Every tool result the model was shown: id -> "state|text". */
  final Map<String, String> resultsSeen = new TreeMap<>();

  ScriptedModel(List<List<ContentBlock>> turns) {
    this.turns = turns;
  }

  static ToolUseBlock use(String id, String name, Map<String, Object> input) {
    return new ToolUseBlock(id, name, input, Json.text(input), null);
  }

  static List<ContentBlock> calls(ToolUseBlock... uses) {
    return List.of(uses);
  }

  static List<ContentBlock> text(String s) {
    return List.of(TextBlock.builder().text(s).build());
  }

  @Override
  public String getModelName() {
    return "scripted";
  }

  @Override
  protected synchronized Flux<ChatResponse> doStream(List<Msg> messages, List<ToolSchema> tools, GenerateOptions options) {
    Map<String, String> seen = new TreeMap<>();
    if (tools != null) {
      for (ToolSchema t : tools) {
        seen.put(t.getName(), Json.text(t.getParameters()));
      }
    }
    toolsSeen.add(seen);
    for (Msg m : messages) {
      for (ToolResultBlock r : m.getContentBlocks(ToolResultBlock.class)) {
        StringBuilder b = new StringBuilder();
        r.getOutput().forEach(c -> b.append(c instanceof TextBlock t ? t.getText() : Json.text(c)));
        resultsSeen.put(r.getId(), b.toString());
      }
    }
    List<ContentBlock> turn = next < turns.size() ? turns.get(next++) : text("done");
    return Flux.just(ChatResponse.builder().id("resp-" + next).content(turn).build());
  }
}
