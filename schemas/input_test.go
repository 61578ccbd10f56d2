package schemas_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

func TestParseInput(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantRaw  string
		wantVal  any
		wantErr  string // exact message; "" means accepted
		absentIn bool   // pass a nil RawMessage
	}{
		{name: "object", raw: `{"city":"Oslo","n":1.50}`, wantRaw: `{"city":"Oslo","n":1.50}`,
			wantVal: map[string]any{"city": "Oslo", "n": json.Number("1.50")}},
		{name: "object with whitespace", raw: " {\n \"city\" : \"Oslo Town\" }\n", wantRaw: `{"city":"Oslo Town"}`,
			wantVal: map[string]any{"city": "Oslo Town"}},
		{name: "string holding object", raw: `"{\"env\": \"prod\"}"`, wantRaw: `{"env":"prod"}`,
			wantVal: map[string]any{"env": "prod"}},
		{name: "nested values", raw: `{"a":[1,{"b":null}],"c":true}`, wantRaw: `{"a":[1,{"b":null}],"c":true}`,
			wantVal: map[string]any{"a": []any{json.Number("1"), map[string]any{"b": nil}}, "c": true}},
		{name: "absent", absentIn: true, wantRaw: `{}`, wantVal: map[string]any{}},
		{name: "empty", raw: ``, wantRaw: `{}`, wantVal: map[string]any{}},
		{name: "blank", raw: "  \n", wantRaw: `{}`, wantVal: map[string]any{}},
		{name: "null", raw: `null`,
			wantErr: "input must be a JSON object or a string holding one, got null"},
		{name: "empty string", raw: `""`,
			wantErr: "input must be a JSON object or a string holding one, got an empty string"},

		{name: "string holding array", raw: `"[1,2]"`,
			wantErr: "input must be a JSON object or a string holding one, got string holding array"},
		{name: "string holding text", raw: `"hello"`,
			wantErr: "input must be a JSON object or a string holding one, got string holding invalid JSON (invalid character 'h' looking for beginning of value)"},
		{name: "string holding string", raw: `"\"{}\""`,
			wantErr: "input must be a JSON object or a string holding one, got string holding string"},
		{name: "number", raw: `42`,
			wantErr: "input must be a JSON object or a string holding one, got number"},
		{name: "array", raw: `[{"a":1}]`,
			wantErr: "input must be a JSON object or a string holding one, got array"},
		{name: "boolean", raw: `true`,
			wantErr: "input must be a JSON object or a string holding one, got boolean"},
		{name: "broken object", raw: `{"a":`,
			wantErr: "input is not valid JSON: unexpected end of JSON input"},
		{name: "two objects", raw: `{} {}`,
			wantErr: "input is not valid JSON: invalid character '{' after top-level value"},
		{name: "broken string", raw: `"{`,
			wantErr: "input is not valid JSON: unexpected end of JSON input"},
		{name: "garbage", raw: `x`,
			wantErr: "input is not valid JSON: invalid character 'x' looking for beginning of value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := json.RawMessage(tt.raw)
			if tt.absentIn {
				in = nil
			}
			raw, val, err := schemas.ParseInput(in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseInput(%s) error = %v, want %q", tt.raw, err, tt.wantErr)
				}
				if raw != nil || val != nil {
					t.Errorf("ParseInput(%s) = %s, %v with an error, want nil, nil", tt.raw, raw, val)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseInput(%s): %v", tt.raw, err)
			}
			if string(raw) != tt.wantRaw {
				t.Errorf("ParseInput(%s) raw = %s, want %s", tt.raw, raw, tt.wantRaw)
			}
			if diff := cmp.Diff(tt.wantVal, val); diff != "" {
				t.Errorf("ParseInput(%s) value mismatch (-want +got):\n%s", tt.raw, diff)
			}
		})
	}
}

func TestInvalidInputMessage(t *testing.T) {
	tests := []struct {
		name    string
		details []bus.Detail
		want    string
	}{
		{"one", []bus.Detail{{Path: "/city", Message: "expected string, but got number"}},
			"Input validation failed for tool 'get_weather':\n/city: expected string, but got number"},
		{"two", []bus.Detail{
			{Path: "/", Message: "missing property 'city'"},
			{Path: "/days", Message: "must be >= 1 but found 0"}},
			"Input validation failed for tool 'get_weather':\n/: missing property 'city'\n/days: must be >= 1 but found 0"},
		{"none", nil, "Input validation failed for tool 'get_weather':"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := schemas.InvalidInputMessage("get_weather", tt.details); got != tt.want {
				t.Errorf("InvalidInputMessage() = %q, want %q", got, tt.want)
			}
		})
	}
}

// The router's path: parse, validate, and build the result text.
func TestParseValidateMessage(t *testing.T) {
	s := mustCompile(t, `{"type":"object","properties":{"env":{"enum":["dev","prod"]}},"required":["env"]}`)
	_, v, err := schemas.ParseInput(json.RawMessage(`"{\"env\": \"staging\"}"`))
	if err != nil {
		t.Fatal(err)
	}
	got := schemas.InvalidInputMessage("deploy", s.Validate(v))
	want := "Input validation failed for tool 'deploy':\n/env: value must be one of \"dev\", \"prod\""
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
