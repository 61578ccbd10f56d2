package schemas_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

func exportDefs() []bus.ToolDef {
	var deploy bus.ToolDef
	if err := json.Unmarshal([]byte(`{"name":"deploy","description":"Deploy <env> & wait.",
		"input_schema":{"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]},
		"groups":["ops"],"idempotent":true}`), &deploy); err != nil {
		panic(err)
	}
	return []bus.ToolDef{
		{Name: "get_weather", Description: "Weather for a city.", ReadOnly: true, ConcurrencySafe: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`),
			TimeoutMS:   1000, MaxAttempts: 2, Permission: bus.PermissionAllow, RuleMatcher: bus.MatcherNone},
		deploy,
		{Name: "ping", Description: ""}, // no schema
	}
}

func TestExport(t *testing.T) {
	const (
		weather = `{"type":"object","properties":{"city":{"type":"string"}}}`
		deploy  = `{"type":"object","properties":{"env":{"type":"string"}},"required":["env"]}`
		empty   = `{"type":"object","properties":{}}`
	)
	toolbus := []string{
		`{"name":"get_weather","description":"Weather for a city.","input_schema":` + weather + `,"read_only":true,"concurrency_safe":true,"idempotent":false,"external":false,"state_injected":false,"timeout_ms":1000,"max_attempts":2,"permission":"allow","rule_matcher":"none"}`,
		`{"name":"deploy","description":"Deploy <env> & wait.","input_schema":` + deploy + `,"groups":["ops"],"read_only":false,"concurrency_safe":true,"idempotent":true,"external":false,"state_injected":false,"timeout_ms":300000,"max_attempts":1,"permission":"passthrough","rule_matcher":"none"}`,
		`{"name":"ping","description":"","input_schema":` + empty + `,"read_only":false,"concurrency_safe":false,"idempotent":false,"external":false,"state_injected":false,"timeout_ms":0,"max_attempts":0,"permission":"","rule_matcher":""}`,
	}
	tests := []struct {
		format string
		want   []string
	}{
		{"toolbus", toolbus},
		{"", toolbus},
		{"openai", []string{
			`{"type":"function","function":{"name":"get_weather","description":"Weather for a city.","parameters":` + weather + `}}`,
			`{"type":"function","function":{"name":"deploy","description":"Deploy <env> & wait.","parameters":` + deploy + `}}`,
			`{"type":"function","function":{"name":"ping","description":"","parameters":` + empty + `}}`,
		}},
		{"openai-responses", []string{
			`{"type":"function","name":"get_weather","description":"Weather for a city.","parameters":` + weather + `,"strict":false}`,
			`{"type":"function","name":"deploy","description":"Deploy <env> & wait.","parameters":` + deploy + `,"strict":false}`,
			`{"type":"function","name":"ping","description":"","parameters":` + empty + `,"strict":false}`,
		}},
		{"anthropic", []string{
			`{"name":"get_weather","description":"Weather for a city.","input_schema":` + weather + `}`,
			`{"name":"deploy","description":"Deploy <env> & wait.","input_schema":` + deploy + `}`,
			`{"name":"ping","description":"","input_schema":` + empty + `}`,
		}},
		{"gemini", []string{
			`{"name":"get_weather","description":"Weather for a city.","parametersJsonSchema":` + weather + `}`,
			`{"name":"deploy","description":"Deploy <env> & wait.","parametersJsonSchema":` + deploy + `}`,
			`{"name":"ping","description":"","parametersJsonSchema":` + empty + `}`,
		}},
		{"mcp", []string{
			`{"name":"get_weather","description":"Weather for a city.","inputSchema":` + weather + `,"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":false}}`,
			`{"name":"deploy","description":"Deploy <env> & wait.","inputSchema":` + deploy + `,"annotations":{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":true},"_meta":{"io.modelcontextprotocol/groups":["ops"]}}`,
			`{"name":"ping","description":"","inputSchema":` + empty + `,"annotations":{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":false}}`,
		}},
	}
	for _, tt := range tests {
		t.Run("format="+tt.format, func(t *testing.T) {
			got, err := schemas.Export(tt.format, exportDefs())
			if err != nil {
				t.Fatal(err)
			}
			gotS := make([]string, len(got))
			for i, g := range got {
				gotS[i] = string(g)
			}
			// Byte comparison: key order and the schema bytes are part of the contract.
			if diff := cmp.Diff(tt.want, gotS); diff != "" {
				t.Errorf("Export(%q) mismatch (-want +got):\n%s", tt.format, diff)
			}
		})
	}
}

func TestExportErrors(t *testing.T) {
	_, err := schemas.Export("claude", exportDefs())
	want := `schemas: unknown format "claude" (want toolbus, openai, openai-responses, anthropic, gemini or mcp)`
	if err == nil || err.Error() != want {
		t.Errorf("Export(claude) error = %v, want %q", err, want)
	}
	bad := []bus.ToolDef{{Name: "x", InputSchema: json.RawMessage(`{"type":`)}}
	if _, err := schemas.Export(bus.FormatOpenAI, bad); err == nil {
		t.Error("Export accepted a schema that is not JSON")
	}
}

func TestExportEmpty(t *testing.T) {
	got, err := schemas.Export(bus.FormatMCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(got); string(b) != "[]" {
		t.Errorf("Export(nil) marshals to %s, want []", b)
	}
}

// TestExportMCPHints: a bridged tool's own destructiveHint and
// openWorldHint are listed as its server gave them, with its title.
func TestExportMCPHints(t *testing.T) {
	f, tr := false, true
	defs := []bus.ToolDef{{Name: "mcp__fs__write", Title: "Write", InputSchema: json.RawMessage(`{"type":"object"}`),
		MCP: &bus.MCPRef{Server: "fs", Tool: "write", Annotations: &bus.MCPAnnotations{DestructiveHint: &f, OpenWorldHint: &tr}}}}
	got, err := schemas.Export("mcp", defs)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"name":"mcp__fs__write","title":"Write","description":"","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":true}}`
	if string(got[0]) != want {
		t.Fatalf("got  %s\nwant %s", got[0], want)
	}
}
