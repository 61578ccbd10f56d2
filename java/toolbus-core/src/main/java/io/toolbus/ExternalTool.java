package io.toolbus;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;

/** A request-scoped, schema-only tool the caller executes itself (docs/protocol.md 4.3). */
public record ExternalTool(
    String name, String description, @JsonProperty("input_schema") JsonNode inputSchema) {}
