package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

// TestExportDeferred checks the deferred listings against the shapes the
// providers document (docs/schemas.md, "Deferred tools"): OpenAI Responses
// puts a group's tools in a namespace, each function with defer_loading,
// and adds {"type":"tool_search"}; Anthropic marks each tool with
// defer_loading and adds the BM25 tool search tool. Namespaces without
// tools are left out, and without any the listing is Export's.
func TestExportDeferred(t *testing.T) {
	active := []bus.ToolDef{{Name: "echo", Description: "Echo.", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}}
	ns := []schemas.Namespace{
		{Name: "ops", Description: "Deploy & roll back.", Tools: []bus.ToolDef{
			{Name: "deploy", Description: "Deploy <env>.", InputSchema: json.RawMessage(`{"type": "object", "properties": {"env": {"type": "string"}}}`)},
			{Name: "ping"}, // no schema
		}},
		{Name: "empty", Description: "No tools."},
		{Name: "web", Description: "Search the web.", Tools: []bus.ToolDef{{Name: "search", Description: "Search.", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}}},
	}
	cases := []struct {
		name, format string
		ns           []schemas.Namespace
		want         []string
	}{
		{"openai-responses", bus.FormatOpenAIResponses, ns, []string{
			`{"type":"function","name":"echo","description":"Echo.","parameters":{"type":"object","properties":{"text":{"type":"string"}}},"strict":false}`,
			`{"type":"namespace","name":"ops","description":"Deploy & roll back.","tools":[` +
				`{"type":"function","name":"deploy","description":"Deploy <env>.","parameters":{"type":"object","properties":{"env":{"type":"string"}}},"strict":false,"defer_loading":true},` +
				`{"type":"function","name":"ping","description":"","parameters":{"type":"object","properties":{}},"strict":false,"defer_loading":true}]}`,
			`{"type":"namespace","name":"web","description":"Search the web.","tools":[` +
				`{"type":"function","name":"search","description":"Search.","parameters":{"type":"object","properties":{}},"strict":false,"defer_loading":true}]}`,
			`{"type":"tool_search"}`,
		}},
		{"anthropic", bus.FormatAnthropic, ns, []string{
			`{"name":"echo","description":"Echo.","input_schema":{"type":"object","properties":{"text":{"type":"string"}}}}`,
			`{"name":"deploy","description":"Deploy <env>.","input_schema":{"type":"object","properties":{"env":{"type":"string"}}},"defer_loading":true}`,
			`{"name":"ping","description":"","input_schema":{"type":"object","properties":{}},"defer_loading":true}`,
			`{"name":"search","description":"Search.","input_schema":{"type":"object","properties":{}},"defer_loading":true}`,
			`{"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"}`,
		}},
		{"nothing deferred (openai-responses)", bus.FormatOpenAIResponses, []schemas.Namespace{{Name: "empty"}}, []string{
			`{"type":"function","name":"echo","description":"Echo.","parameters":{"type":"object","properties":{"text":{"type":"string"}}},"strict":false}`,
		}},
		{"nothing deferred (anthropic)", bus.FormatAnthropic, nil, []string{
			`{"name":"echo","description":"Echo.","input_schema":{"type":"object","properties":{"text":{"type":"string"}}}}`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := schemas.ExportDeferred(c.format, active, c.ns)
			if err != nil {
				t.Fatal(err)
			}
			var gotS []string
			for _, g := range got {
				gotS = append(gotS, string(g))
			}
			if diff := cmp.Diff(c.want, gotS); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestExportDeferredRefusesOtherFormats: Chat Completions, Gemini, MCP and
// toolbus listings have no deferred tools; asking for them is an error.
func TestExportDeferredRefusesOtherFormats(t *testing.T) {
	ns := []schemas.Namespace{{Name: "ops", Tools: []bus.ToolDef{{Name: "deploy"}}}}
	for _, f := range []string{bus.FormatOpenAI, bus.FormatGemini, bus.FormatMCP, bus.FormatToolbus, "", "nope"} {
		t.Run(f, func(t *testing.T) {
			got, err := schemas.ExportDeferred(f, nil, ns)
			if err == nil || !strings.Contains(err.Error(), "openai-responses and anthropic formats only") || got != nil {
				t.Fatalf("ExportDeferred(%q) = %s, %v", f, got, err)
			}
		})
	}
	bad := []schemas.Namespace{{Name: "ops", Tools: []bus.ToolDef{{Name: "deploy", InputSchema: json.RawMessage(`{`)}}}}
	if _, err := schemas.ExportDeferred(bus.FormatAnthropic, nil, bad); err == nil {
		t.Fatal("a schema that is not JSON was exported")
	}
}
