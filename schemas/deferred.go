package schemas

import (
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/bus"
)

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

type (
	// deferredResponsesTool and deferredAnthropicTool are the tools of
	// Export with defer_loading.
	deferredResponsesTool struct {
		openAIResponsesTool
		DeferLoading bool `json:"defer_loading"`
	}
	deferredAnthropicTool struct {
		anthropicTool
		DeferLoading bool `json:"defer_loading"`
	}
	responsesNamespace struct {
		Type        string            `json:"type"`
		Name        string            `json:"name"`
		Description string            `json:"description"`
		Tools       []json.RawMessage `json:"tools"`
	}
	typeOnly struct {
		Type string `json:"type"`
	}
	anthropicServerTool struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
)

// ExportDeferred renders defs as Export does, then the namespaces' tools
// marked deferred and the provider's tool search tool:
//
//	"openai-responses": one {"type":"namespace","name","description","tools":[...]}
//	    per namespace, each tool a function with "defer_loading": true, then
//	    {"type":"tool_search"};
//	"anthropic": each namespace's tools with "defer_loading": true, in
//	    namespace order, then {"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"}.
//
// Namespaces without tools are left out; without any, the result is
// Export's. Other formats are an error: their APIs have no deferred tools.
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
		items, err := deferredTools(format, n.Tools)
		if err != nil {
			return nil, err
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
	var search any = typeOnly{Type: OpenAIToolSearch}
	if format == bus.FormatAnthropic {
		search = anthropicServerTool{Type: AnthropicToolSearchType, Name: AnthropicToolSearchName}
	}
	b, err := marshal(search)
	if err != nil {
		return nil, err
	}
	return append(out, b), nil
}

// deferredTools renders defs, each with "defer_loading": true.
func deferredTools(format string, defs []bus.ToolDef) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(defs))
	for i := range defs {
		d := &defs[i]
		schema := inputSchema(d)
		var v any = deferredResponsesTool{openAIResponsesTool{Type: "function", named: named{d.Name, d.Description}, Parameters: schema}, true}
		if format == bus.FormatAnthropic {
			v = deferredAnthropicTool{anthropicTool{named{d.Name, d.Description}, schema}, true}
		}
		b, err := marshal(v)
		if err != nil {
			return nil, fmt.Errorf("schemas: export %q as %s: %w", d.Name, format, err)
		}
		out = append(out, b)
	}
	return out, nil
}
