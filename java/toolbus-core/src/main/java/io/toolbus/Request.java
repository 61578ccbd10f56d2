package io.toolbus;

import com.fasterxml.jackson.annotation.JsonProperty;
import java.util.List;

/** The request-scoped tool configuration of a batch or query (docs/protocol.md 4.3). */
public record Request(
    @JsonProperty("merge_mode") String mergeMode,
    @JsonProperty("external_tools") List<ExternalTool> externalTools) {}
