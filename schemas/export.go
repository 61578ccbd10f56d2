package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"

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
	// geminiFunction is a Gemini FunctionDeclaration with the schema in
	// parametersJsonSchema, which takes JSON Schema as it is (with
	// additionalProperties, $ref, anyOf ...); its "parameters" takes only
	// an OpenAPI 3.0 subset, and Gemini answers 400 to a keyword outside
	// it (docs/schemas.md).
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

// Export renders tool definitions in a listing format of docs/protocol.md 4.1, one
// element per definition, in order:
//
//	"toolbus" (or ""): the bus.ToolDef itself
//	"openai": {"type":"function","function":{"name","description","parameters"}}
//	"openai-responses": {"type":"function","name","description","parameters","strict":false}
//	"anthropic": {"name","description","input_schema"}
//	"gemini": {"name","description","parametersJsonSchema"}
//	"mcp": {"name","description","inputSchema","annotations":{"readOnlyHint","destructiveHint","idempotentHint"},
//	        "_meta":{"io.modelcontextprotocol/groups":[groups]} when the definition has groups}
//
// with destructiveHint = !read_only, unless the definition is a bridged MCP
// tool whose server gave destructiveHint (mcp.annotations, docs/protocol.md 7.2):
// then the server's value, and its openWorldHint; "title" when the
// definition has one. The input schema is passed through
// unchanged (compacted, without HTML escaping); an empty, absent or null one becomes
// {"type":"object","properties":{}}, in every format. An unknown format is an
// error; so is a definition whose schema is not valid JSON. The result is
// never nil.
func Export(format string, defs []bus.ToolDef) ([]json.RawMessage, error) {
	render, err := exporter(format)
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, 0, len(defs))
	for i := range defs {
		d := &defs[i]
		b, err := marshal(render(d, inputSchema(d)))
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

func exporter(format string) (func(d *bus.ToolDef, schema json.RawMessage) any, error) {
	switch format {
	case bus.FormatToolbus, "":
		return func(d *bus.ToolDef, schema json.RawMessage) any {
			c := *d
			c.InputSchema = schema
			return &c
		}, nil
	case bus.FormatOpenAI:
		return func(d *bus.ToolDef, schema json.RawMessage) any {
			return openAITool{Type: "function", Function: openAIFunction{named{d.Name, d.Description}, schema}}
		}, nil
	case bus.FormatOpenAIResponses:
		return func(d *bus.ToolDef, schema json.RawMessage) any {
			return openAIResponsesTool{Type: "function", named: named{d.Name, d.Description}, Parameters: schema}
		}, nil
	case bus.FormatAnthropic:
		return func(d *bus.ToolDef, schema json.RawMessage) any {
			return anthropicTool{named{d.Name, d.Description}, schema}
		}, nil
	case bus.FormatGemini:
		return func(d *bus.ToolDef, schema json.RawMessage) any {
			return geminiFunction{named{d.Name, d.Description}, schema}
		}, nil
	case bus.FormatMCP:
		return func(d *bus.ToolDef, schema json.RawMessage) any {
			t := mcpTool{Name: d.Name, Title: d.Title, Description: d.Description, InputSchema: schema, Annotations: mcpHints(d)}
			if len(d.OutputSchema) > 0 && string(d.OutputSchema) != "null" {
				t.OutputSchema = d.OutputSchema
			}
			if len(d.Groups) > 0 {
				t.Meta = map[string][]string{GroupsMetaKey: d.Groups}
			}
			return t
		}, nil
	}
	return nil, fmt.Errorf("schemas: unknown format %q (want toolbus, openai, openai-responses, anthropic, gemini or mcp)", format)
}

// mcpHints are the MCP annotations of d: read_only and idempotent, and
// destructiveHint and openWorldHint as a bridged tool's server gave them
// (else destructiveHint = !read_only).
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
