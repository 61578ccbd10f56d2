package schemas_test

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

// TestExportsMeetProviderRules checks each model export of a schema that
// uses keywords outside the narrow subsets (additionalProperties, $ref,
// $defs, const, anyOf) against the rule its provider publishes
// (docs/schemas.md, "Model exports"):
//   - Gemini: the schema goes in parametersJsonSchema, which takes JSON
//     Schema; "parameters" (OpenAPI 3.0 subset, 400 on such keywords) is
//     absent, and the two are mutually exclusive;
//   - OpenAI Responses: strict is false, so strict mode's rules (every
//     property required, additionalProperties false everywhere) do not
//     apply; Chat Completions has no strict member (false by default);
//   - Anthropic: input_schema is an object schema ("type": "object").
func TestExportsMeetProviderRules(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"env":{"$ref":"#/$defs/env"},"n":{"anyOf":[{"type":"integer"},{"const":"all"}]}},"additionalProperties":false,"$defs":{"env":{"enum":["prod","staging"]}}}`)
	defs := []bus.ToolDef{{Name: "deploy", Description: "Deploy.", InputSchema: schema}}
	get := func(format string) map[string]json.RawMessage {
		out, err := schemas.Export(format, defs)
		if err != nil || len(out) != 1 {
			t.Fatalf("%s: %v", format, err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out[0], &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	same := func(a, b json.RawMessage) bool {
		var x, y any
		_ = json.Unmarshal(a, &x)
		_ = json.Unmarshal(b, &y)
		xb, _ := json.Marshal(x)
		yb, _ := json.Marshal(y)
		return string(xb) == string(yb)
	}
	g := get(bus.FormatGemini)
	if _, ok := g["parameters"]; ok || !same(g["parametersJsonSchema"], schema) {
		t.Errorf("gemini: %v", g)
	}
	if r := get(bus.FormatOpenAIResponses); string(r["strict"]) != "false" {
		t.Errorf("openai-responses: strict %s", r["strict"])
	}
	var fn map[string]json.RawMessage
	if err := json.Unmarshal(get(bus.FormatOpenAI)["function"], &fn); err != nil {
		t.Fatal(err)
	}
	if _, ok := fn["strict"]; ok {
		t.Errorf("openai: strict %s", fn["strict"])
	}
	var in struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(get(bus.FormatAnthropic)["input_schema"], &in); err != nil || in.Type != "object" {
		t.Errorf("anthropic: input_schema type %q %v", in.Type, err)
	}
}
