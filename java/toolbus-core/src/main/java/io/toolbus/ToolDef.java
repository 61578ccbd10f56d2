package io.toolbus;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/**
 * A tool definition (docs/protocol.md 7.2), decoded strictly. Build one with {@link #builder}; a
 * member left null takes the protocol's default.
 */
public record ToolDef(
    String name,
    String title,
    String description,
    @JsonProperty("input_schema") JsonNode inputSchema,
    @JsonProperty("output_schema") JsonNode outputSchema,
    List<String> groups,
    @JsonProperty("read_only") Boolean readOnly,
    @JsonProperty("concurrency_safe") Boolean concurrencySafe,
    Boolean idempotent,
    Boolean external,
    @JsonProperty("state_injected") Boolean stateInjected,
    Boolean durable,
    @JsonProperty("timeout_ms") Long timeoutMs,
    @JsonProperty("max_attempts") Integer maxAttempts,
    String permission,
    @JsonProperty("rule_matcher") String ruleMatcher,
    @JsonProperty("rule_field") String ruleField,
    @JsonProperty("path_base") String pathBase,
    JsonNode mcp,
    @JsonProperty("cache_ttl_ms") Long cacheTtlMs,
    @JsonProperty("cache_scope") String cacheScope,
    Boolean background,
    @JsonProperty("no_background") Boolean noBackground) {

  public static Builder builder(String name) {
    return new Builder(name);
  }

  public boolean isDurable() {
    return Boolean.TRUE.equals(durable);
  }

  public boolean isStateInjected() {
    return Boolean.TRUE.equals(stateInjected);
  }

  public boolean isExternal() {
    return Boolean.TRUE.equals(external);
  }

  /** Whether a call past its timeout goes on as a background task (docs/protocol.md 5.10). */
  public boolean isBackground() {
    return Boolean.TRUE.equals(background);
  }

  /**
   * Whether a call's own background ask is ignored, so its calls end at their timeout
   * (docs/protocol.md 5.10, 7.2; 1.12).
   */
  public boolean isNoBackground() {
    return Boolean.TRUE.equals(noBackground);
  }

  /** Builds a definition; concurrency_safe is true unless said. */
  public static final class Builder {
    private final String name;
    private String title;
    private String description = "";
    private JsonNode inputSchema;
    private JsonNode outputSchema;
    private List<String> groups;
    private boolean readOnly;
    private boolean concurrencySafe = true;
    private boolean idempotent;
    private boolean external;
    private boolean stateInjected;
    private Boolean durable;
    private Long timeoutMs;
    private Integer maxAttempts;
    private String permission;
    private String ruleMatcher;
    private String ruleField;
    private Long cacheTtlMs;
    private String cacheScope;
    private Boolean background;
    private Boolean noBackground;

    private Builder(String name) {
      this.name = Ids.requireName("tool name", name);
    }

    public Builder title(String v) { title = v; return this; }
    public Builder description(String v) { description = v; return this; }
    /** The input schema: a JsonNode, a Map, or a JSON text. */
    public Builder inputSchema(Object v) { inputSchema = schema(v); return this; }
    public Builder outputSchema(Object v) { outputSchema = schema(v); return this; }
    public Builder groups(String... g) { groups = List.of(g); return this; }
    public Builder readOnly(boolean v) { readOnly = v; return this; }
    public Builder concurrencySafe(boolean v) { concurrencySafe = v; return this; }
    public Builder idempotent(boolean v) { idempotent = v; return this; }
    public Builder external(boolean v) { external = v; return this; }
    public Builder stateInjected(boolean v) { stateInjected = v; return this; }
    public Builder durable(boolean v) { durable = v ? Boolean.TRUE : null; return this; }
    public Builder timeoutMs(long v) { timeoutMs = v; return this; }
    public Builder maxAttempts(int v) { maxAttempts = v; return this; }
    /** passthrough, allow or ask. */
    public Builder permission(String v) { permission = v; return this; }
    public Builder ruleMatcher(String matcher, String field) { ruleMatcher = matcher; ruleField = field; return this; }
    public Builder cache(long ttlMs, String scope) { cacheTtlMs = ttlMs; cacheScope = scope; return this; }
    /** Past its timeout a call goes on as a background task instead of ending timeout (5.10). */
    public Builder background(boolean v) { background = v ? Boolean.TRUE : null; return this; }
    /** A call's own background ask is ignored: the tool's timeout holds (5.10, 7.2; 1.12). */
    public Builder noBackground(boolean v) { noBackground = v ? Boolean.TRUE : null; return this; }

    private static JsonNode schema(Object v) {
      if (v == null) {
        return null;
      }
      if (v instanceof String s) {
        return Json.parse(s.getBytes(java.nio.charset.StandardCharsets.UTF_8), Codes.BAD_REQUEST, "schema");
      }
      return Json.tree(v);
    }

    public ToolDef build() {
      if (inputSchema == null) {
        throw new IllegalArgumentException("tool " + name + ": input_schema is missing");
      }
      return new ToolDef(name, title, description, inputSchema, outputSchema, groups, readOnly,
          concurrencySafe, idempotent, external, stateInjected, durable, timeoutMs, maxAttempts,
          permission, ruleMatcher, ruleField, null, null, cacheTtlMs, cacheScope, background, noBackground);
    }
  }

  ToolDef withInputSchema(JsonNode s) {
    return new ToolDef(name, title, description, s, outputSchema, groups, readOnly, concurrencySafe,
        idempotent, external, stateInjected, durable, timeoutMs, maxAttempts, permission, ruleMatcher,
        ruleField, pathBase, mcp, cacheTtlMs, cacheScope, background, noBackground);
  }
}
