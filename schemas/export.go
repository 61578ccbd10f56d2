package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/toolbus/toolbus/bus"
)

// emptySchema stands for an empty or absent input schema.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// The listing formats of docs/protocol.md 4.1, as structs so that keys keep their
// order.
type (
	// named is the name and description every format starts with.
	named struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	openAITool struct {
		Type     string         `json:"type"`
		Function openAIFunction `json:"function"`
	}
	openAIFunction struct {
		named
		Parameters json.RawMessage `json:"parameters"`
	}
	openAIResponsesTool struct {
		Type string `json:"type"`
		named
		Parameters json.RawMessage `json:"parameters"`
		Strict     bool            `json:"strict"`
	}
	anthropicTool struct {
		named
		InputSchema json.RawMessage `json:"input_schema"`
	}
	// geminiFunction puts the schema in parametersJsonSchema, which takes
	// JSON Schema as it is; "parameters" takes an OpenAPI 3.0 subset only
	// (docs/schemas.md).
	geminiFunction struct {
		named
		ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
	}
	mcpTool struct {
		Name        string          `json:"name"`
		Title       string          `json:"title,omitempty"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
		// OutputSchema is the definition's output_schema, for hosts at
		// MCP 2025-06-18 and later (structuredContent conforms to it).
		OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
		Annotations  mcpAnnotations  `json:"annotations"`
		// Meta carries the tool's groups under the MCP grouping draft's
		// key (GroupsMetaKey), when it has any.
		Meta map[string][]string `json:"_meta,omitempty"`
	}
	mcpAnnotations struct {
		ReadOnlyHint    bool `json:"readOnlyHint"`
		DestructiveHint bool `json:"destructiveHint"`
		IdempotentHint  bool `json:"idempotentHint"`
		// OpenWorldHint is a bridged MCP tool's own, when its server gave it.
		OpenWorldHint *bool `json:"openWorldHint,omitempty"`
	}
)

// GroupsMetaKey is the _meta key of an MCP primitive's groups in the MCP
// grouping draft (SEP-2084, extension io.modelcontextprotocol/grouping).
const GroupsMetaKey = "io.modelcontextprotocol/groups"

// Export renders tool definitions in a listing format of docs/protocol.md
// 4.1 ("toolbus" or "", "openai", "openai-responses", "anthropic", "gemini",
// "mcp"), one element per definition, in order. The input schema is passed
// through compacted; an empty or null one becomes
// {"type":"object","properties":{}}. mcp's destructiveHint is !read_only
// unless a bridged tool's server gave one (docs/protocol.md 7.2). An unknown
// format, or a schema that is not JSON, is an error. The result is never nil.
func Export(format string, defs []bus.ToolDef) ([]json.RawMessage, error) {
	if !slices.Contains(formats, format) {
		return nil, fmt.Errorf("schemas: unknown format %q (want toolbus, openai, openai-responses, anthropic, gemini or mcp)", format)
	}
	out := make([]json.RawMessage, 0, len(defs))
	for i := range defs {
		d := &defs[i]
		b, err := marshal(exported(format, d, inputSchema(d)))
		if err != nil {
			return nil, fmt.Errorf("schemas: export %q as %s: %w", d.Name, format, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// inputSchema is d's input schema, or {"type":"object","properties":{}}
// when it is empty, absent or null.
func inputSchema(d *bus.ToolDef) json.RawMessage {
	if t := bytes.TrimSpace(d.InputSchema); len(t) == 0 || string(t) == "null" {
		return emptySchema
	}
	return d.InputSchema
}

// marshal encodes v compactly, without HTML escaping ("a < b" stays as
// written).
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

var formats = []string{"", bus.FormatToolbus, bus.FormatOpenAI, bus.FormatOpenAIResponses, bus.FormatAnthropic, bus.FormatGemini, bus.FormatMCP}

// exported is d with its input schema in format, one of formats.
func exported(format string, d *bus.ToolDef, schema json.RawMessage) any {
	n := named{d.Name, d.Description}
	switch format {
	case bus.FormatOpenAI:
		return openAITool{Type: "function", Function: openAIFunction{n, schema}}
	case bus.FormatOpenAIResponses:
		return openAIResponsesTool{Type: "function", named: n, Parameters: schema}
	case bus.FormatAnthropic:
		return anthropicTool{n, schema}
	case bus.FormatGemini:
		return geminiFunction{n, schema}
	case bus.FormatMCP:
		t := mcpTool{Name: d.Name, Title: d.Title, Description: d.Description, InputSchema: schema, Annotations: mcpHints(d)}
		if len(d.OutputSchema) > 0 && string(d.OutputSchema) != "null" {
			t.OutputSchema = d.OutputSchema
		}
		if len(d.Groups) > 0 {
			t.Meta = map[string][]string{GroupsMetaKey: d.Groups}
		}
		return t
	}
	c := *d
	c.InputSchema = schema
	return &c
}

// mcpHints are the MCP annotations of d: read_only, idempotent, and a bridged
// server's destructiveHint and openWorldHint (else destructiveHint = !read_only).
func mcpHints(d *bus.ToolDef) mcpAnnotations {
	h := mcpAnnotations{ReadOnlyHint: d.ReadOnly, DestructiveHint: !d.ReadOnly, IdempotentHint: d.Idempotent}
	if d.MCP == nil || d.MCP.Annotations == nil {
		return h
	}
	if a := d.MCP.Annotations; a.DestructiveHint != nil {
		h.DestructiveHint = *a.DestructiveHint
	}
	h.OpenWorldHint = d.MCP.Annotations.OpenWorldHint
	return h
}

// Namespace is a group whose tools are listed deferred: the model sees the
// group's name and description, and the provider's tool search loads its
// tools when the model asks for them (docs/protocol.md 4.1, "deferred").
type Namespace struct {
	Name        string
	Description string
	Tools       []bus.ToolDef
}

// The provider's tool search tools, as documented (docs/schemas.md,
// "Deferred tools").
const (
	// OpenAIToolSearch is the Responses API's hosted tool search.
	OpenAIToolSearch = "tool_search"
	// AnthropicToolSearchType and AnthropicToolSearchName are the
	// Messages API's BM25 tool search tool.
	AnthropicToolSearchType = "tool_search_tool_bm25_20251119"
	AnthropicToolSearchName = "tool_search_tool_bm25"
	// AnthropicToolSearchBeta is the beta header the Messages API asked
	// for while the tool search tool was in beta.
	AnthropicToolSearchBeta = "advanced-tool-use-2025-11-20"
)

// responsesNamespace is an OpenAI Responses namespace of deferred tools.
type responsesNamespace struct {
	Type        string            `json:"type"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Tools       []json.RawMessage `json:"tools"`
}

// ExportDeferred renders defs as Export does, then the namespaces' tools
// marked defer_loading (openai-responses: as namespaces) and the provider's
// tool search tool. Namespaces without tools are left out; with none it is
// Export. Formats other than openai-responses and anthropic are an error.
func ExportDeferred(format string, defs []bus.ToolDef, ns []Namespace) ([]json.RawMessage, error) {
	if format != bus.FormatOpenAIResponses && format != bus.FormatAnthropic {
		return nil, fmt.Errorf("schemas: deferred tools are listed in the openai-responses and anthropic formats only, not %q", format)
	}
	out, err := Export(format, defs)
	if err != nil {
		return nil, err
	}
	listed := false
	for _, n := range ns {
		if len(n.Tools) == 0 {
			continue
		}
		listed = true
		items, err := Export(format, n.Tools)
		if err != nil {
			return nil, err
		}
		for i, b := range items { // each a JSON object: defer_loading added as its last member
			items[i] = append(b[:len(b)-1:len(b)-1], `,"defer_loading":true}`...)
		}
		if format == bus.FormatAnthropic {
			out = append(out, items...)
			continue
		}
		b, err := marshal(responsesNamespace{Type: "namespace", Name: n.Name, Description: n.Description, Tools: items})
		if err != nil {
			return nil, fmt.Errorf("schemas: export namespace %q: %w", n.Name, err)
		}
		out = append(out, b)
	}
	if !listed {
		return out, nil
	}
	if format == bus.FormatAnthropic {
		return append(out, json.RawMessage(`{"type":"`+AnthropicToolSearchType+`","name":"`+AnthropicToolSearchName+`"}`)), nil
	}
	return append(out, json.RawMessage(`{"type":"`+OpenAIToolSearch+`"}`)), nil
}
