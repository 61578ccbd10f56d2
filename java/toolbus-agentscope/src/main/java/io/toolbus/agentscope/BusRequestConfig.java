package io.toolbus.agentscope;

import io.agentscope.core.model.ToolSchema;
import io.toolbus.Codes;
import io.toolbus.ExternalTool;
import io.toolbus.Json;
import io.toolbus.Request;
import java.util.ArrayList;
import java.util.List;

/**
 * Request-scoped tools with a merge mode, as AgentScope's ToolRequestConfig (pull request #2463,
 * not in agentscope-core 2.0.0) describes them: schema-only tools the caller executes, merged with
 * the bus's tools by {@link MergeMode}. Carried to the bus as docs/protocol.md 4.3's request.
 */
public record BusRequestConfig(MergeMode mergeMode, List<ToolSchema> externalTools) {
  /** The three merge modes of ToolRequestConfig. */
  public enum MergeMode {
    MERGE_EXTERNAL_PRIORITY(Codes.MERGE_EXTERNAL_PRIORITY),
    EXTERNAL_ONLY(Codes.EXTERNAL_ONLY),
    AGENT_ONLY(Codes.AGENT_ONLY);

    final String wire;

    MergeMode(String wire) {
      this.wire = wire;
    }
  }

  public BusRequestConfig {
    externalTools = externalTools == null ? List.of() : List.copyOf(externalTools);
    if (mergeMode == MergeMode.AGENT_ONLY && !externalTools.isEmpty()) {
      throw new IllegalArgumentException("AGENT_ONLY cannot include external tools");
    }
  }

  /** The request of docs/protocol.md 4.3. */
  Request toRequest() {
    List<ExternalTool> ts = new ArrayList<>();
    for (ToolSchema s : externalTools) {
      ts.add(new ExternalTool(s.getName(), s.getDescription() == null ? "" : s.getDescription(), Json.tree(s.getParameters())));
    }
    return new Request(mergeMode == null ? null : mergeMode.wire, ts.isEmpty() ? null : ts);
  }
}
