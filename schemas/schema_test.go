package schemas_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

func TestCompile(t *testing.T) {
	big := `{"type":"object","description":"` + strings.Repeat("x", schemas.MaxSchemaBytes) + `"}`
	tests := []struct {
		name    string
		raw     string
		wantErr string // substring; "" means accepted
	}{
		{"object", `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`, ""},
		{"no properties", `{"type":"object"}`, ""},
		{"pretty printed", "{\n  \"type\": \"object\"\n}", ""},
		{"internal ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}}}`, ""},
		{"anchor ref", `{"type":"object","properties":{"a":{"$ref":"#s"}},"$defs":{"x":{"$anchor":"s","type":"string"}}}`, ""},
		{"recursive tree", `{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}`, ""},
		{"ref-like data in default", `{"type":"object","default":{"$ref":"http://x/y.json"}}`, ""},
		{"property named $ref", `{"type":"object","properties":{"$ref":{"type":"string"}}}`, ""},
		{"draft-07", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"x":{"type":"string"}},"properties":{"a":{"$ref":"#/definitions/x"}}}`, ""},
		{"draft 2019-09", `{"$schema":"https://json-schema.org/draft/2019-09/schema","type":"object"}`, ""},
		{"draft-04", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`, ""},
		{"exactly the limit", `{"type":"object","description":"` + strings.Repeat("x", schemas.MaxSchemaBytes-len(`{"type":"object","description":""}`)) + `"}`, ""},

		{"not JSON", `{"type":`, "schemas: schema is not valid JSON"},
		{"trailing data", `{"type":"object"} {}`, "schemas: schema is not valid JSON"},
		{"empty", ``, "schemas: schema is empty"},
		{"null", `null`, "schemas: schema must be a JSON object, got null"},
		{"array schema", `[{"type":"object"}]`, "schemas: schema must be a JSON object, got array"},
		{"boolean schema", `true`, "schemas: schema must be a JSON object, got boolean"},
		{"type string", `{"type":"string"}`, `schemas: schema must have "type": "object" at the top level, got "string"`},
		{"no type", `{"properties":{}}`, `schemas: schema must have "type": "object" at the top level, got none`},
		{"type list", `{"type":["object","null"]}`, `got ["object","null"]`},
		{"external ref", `{"type":"object","properties":{"a":{"$ref":"http://x/y.json"}}}`, `schemas: external $ref "http://x/y.json" is not allowed`},
		{"relative ref", `{"type":"object","properties":{"a":{"$ref":"other.json#/a"}}}`, `schemas: external $ref "other.json#/a" is not allowed`},
		{"ref in items list", `{"type":"object","properties":{"a":{"type":"array","items":[{"$ref":"x.json"}]}}}`, `external $ref "x.json"`},
		{"external dynamicRef", `{"type":"object","allOf":[{"$dynamicRef":"https://x/s#meta"}]}`, `external $dynamicRef "https://x/s#meta"`},
		{"unknown $schema", `{"$schema":"https://example.com/my-meta","type":"object"}`, `schemas: unsupported $schema "https://example.com/my-meta"`},
		{"file $schema", `{"$schema":"file:///etc/passwd","type":"object"}`, `schemas: unsupported $schema "file:///etc/passwd"`},
		{"$schema not a URI", `{"$schema":"draft-07","type":"object"}`, `schemas: invalid schema: $schema must be uri`},
		{"ref loop", `{"type":"object","$ref":"#"}`, `schemas: invalid schema: infinite loop`},
		{"bad keyword value", `{"type":"object","properties":{"a":{"type":"strin"}}}`, `/properties/a/type: value must be one of "array", "boolean", "integer", "null", "number", "object", "string"`},
		{"bad regex", `{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`, `schemas: invalid schema: /properties/a/pattern: '(' is not valid 'regex'`},
		{"missing internal ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/nope"}}}`, `schemas: invalid schema: #/$defs/nope not found`},
		{"oversize", big, "schemas: schema is 65570 bytes, more than the limit of 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := schemas.Compile(json.RawMessage(tt.raw))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				if !json.Valid(s.Raw()) || strings.ContainsAny(string(s.Raw()), "\n") {
					t.Errorf("Raw() = %s, want compact JSON", s.Raw())
				}
				return
			}
			if err == nil {
				t.Fatalf("Compile accepted %s", tt.raw)
			}
			if !strings.HasPrefix(err.Error(), "schemas: ") || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Compile error = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestRawIsCompact(t *testing.T) {
	s := mustCompile(t, "{ \"type\" : \"object\",\n \"description\": \"a < b\" }")
	if got, want := string(s.Raw()), `{"type":"object","description":"a < b"}`; got != want {
		t.Errorf("Raw() = %s, want %s", got, want)
	}
}

const testSchema = `{
  "type": "object",
  "properties": {
    "city":  {"type": "string"},
    "units": {"enum": ["metric", "imperial"]},
    "days":  {"type": "integer", "minimum": 1},
    "level": {"enum": [1, 2, 3]},
    "mode":  {"const": "fast"},
    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
    "a/b":   {"type": "boolean"}
  },
  "required": ["city", "days"],
  "additionalProperties": false,
  "$defs": {
    "item": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
  }
}`

func TestValidate(t *testing.T) {
	s := mustCompile(t, testSchema)
	tests := []struct {
		name  string
		input string
		want  []bus.Detail
	}{
		{"valid", `{"city":"Oslo","days":3,"units":"metric","items":[{"name":"x"}]}`, nil},
		{"integer as 3.0", `{"city":"Oslo","days":3.0}`, nil},
		{"type mismatch", `{"city":1,"days":2}`, []bus.Detail{
			{Path: "/city", Message: "expected string, but got number"}}},
		{"missing required", `{}`, []bus.Detail{
			{Path: "/", Message: "missing property 'city'"},
			{Path: "/", Message: "missing property 'days'"}}},
		{"enum", `{"city":"Oslo","days":1,"units":"kelvin"}`, []bus.Detail{
			{Path: "/units", Message: `value must be one of "metric", "imperial"`}}},
		{"numeric enum", `{"city":"Oslo","days":1,"level":7}`, []bus.Detail{
			{Path: "/level", Message: `value must be one of 1, 2, 3`}}},
		{"const", `{"city":"Oslo","days":1,"mode":"slow"}`, []bus.Detail{
			{Path: "/mode", Message: `value must be "fast"`}}},
		{"minimum", `{"city":"Oslo","days":0}`, []bus.Detail{
			{Path: "/days", Message: "must be >= 1 but found 0"}}},
		{"nested array item", `{"city":"Oslo","days":1,"items":[{"name":"ok"},{"name":5},{}]}`, []bus.Detail{
			{Path: "/items/1/name", Message: "expected string, but got number"},
			{Path: "/items/2", Message: "missing property 'name'"}}},
		{"additional properties", `{"city":"Oslo","days":1,"zeta":1,"alpha":2}`, []bus.Detail{
			{Path: "/", Message: "additional property 'alpha' is not allowed"},
			{Path: "/", Message: "additional property 'zeta' is not allowed"}}},
		{"escaped pointer", `{"city":"Oslo","days":1,"a/b":"yes"}`, []bus.Detail{
			{Path: "/a~1b", Message: "expected boolean, but got string"}}},
		{"root", `[1]`, []bus.Detail{
			{Path: "/", Message: "expected object, but got array"}}},
		{"everything sorted", `{"x":1,"days":"3","city":false,"items":[{"name":1}]}`, []bus.Detail{
			{Path: "/", Message: "additional property 'x' is not allowed"},
			{Path: "/city", Message: "expected string, but got boolean"},
			{Path: "/days", Message: "expected integer, but got string"},
			{Path: "/items/0/name", Message: "expected string, but got number"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Validate(decode(t, tt.input))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate(%s) mismatch (-want +got):\n%s", tt.input, diff)
			}
		})
	}
}

func TestValidateDeterministic(t *testing.T) {
	s := mustCompile(t, testSchema)
	v := decode(t, `{"a":1,"b":2,"c":3,"d":4,"e":5,"city":1,"items":[1,{},{"name":2}]}`)
	first := s.Validate(v)
	if len(first) != 10 {
		t.Fatalf("got %d details, want 10: %v", len(first), first)
	}
	for range 50 {
		if diff := cmp.Diff(first, s.Validate(v)); diff != "" {
			t.Fatalf("Validate is not deterministic (-first +now):\n%s", diff)
		}
	}
}

func TestValidateAnyOfFlattened(t *testing.T) {
	s := mustCompile(t, `{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`)
	got := s.Validate(decode(t, `{"v":true}`))
	want := []bus.Detail{
		{Path: "/v", Message: "expected integer, but got boolean"},
		{Path: "/v", Message: "expected string, but got boolean"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
}

func TestValidateNotJSONValue(t *testing.T) {
	s := mustCompile(t, `{"type":"object"}`)
	got := s.Validate(make(chan int))
	if len(got) != 1 || got[0].Path != "/" || !strings.HasPrefix(got[0].Message, "input could not be validated") {
		t.Errorf("Validate(non-JSON value) = %v, want one root detail", got)
	}
}

func TestValidateConcurrent(t *testing.T) {
	s := mustCompile(t, testSchema)
	bad := decode(t, `{"city":1}`)
	good := decode(t, `{"city":"Oslo","days":1}`)
	done := make(chan []bus.Detail)
	for i := range 8 {
		go func() {
			v := good
			if i%2 == 1 {
				v = bad
			}
			var last []bus.Detail
			for range 100 {
				last = s.Validate(v)
			}
			done <- last
		}()
	}
	for range 8 {
		<-done
	}
}

func BenchmarkValidate(b *testing.B) {
	s, err := schemas.Compile(json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1},"units":{"enum":["metric","imperial"]}},"required":["city"],"additionalProperties":false}`))
	if err != nil {
		b.Fatal(err)
	}
	_, v, err := schemas.ParseInput(json.RawMessage(`{"city":"Oslo","days":3,"units":"metric"}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := s.Validate(v); d != nil {
			b.Fatal(d)
		}
	}
}

func mustCompile(t *testing.T, raw string) *schemas.Schema {
	t.Helper()
	s, err := schemas.Compile(json.RawMessage(raw))
	if err != nil {
		t.Fatalf("Compile(%s): %v", raw, err)
	}
	return s
}

func decode(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

// BenchmarkCheckInput is the router's check of a call's input, the bench
// tool's and a larger one: CheckInput (from the bytes), and the
// ParseInput and Validate it replaces.
func BenchmarkCheckInput(b *testing.B) {
	s, err := schemas.Compile(json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"city":{"type":"string"},"days":{"type":"integer","minimum":1},"units":{"enum":["metric","imperial"]}},"additionalProperties":false}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, in := range []string{`{"text":"hello"}`, `{"city":"Oslo","days":3,"units":"metric","text":"a longer text of some sixty bytes, as a model writes"}`} {
		raw := json.RawMessage(in)
		b.Run(fmt.Sprintf("%dB/CheckInput", len(in)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, d, err := schemas.CheckInput(raw, s); d != nil || err != nil {
					b.Fatal(d, err)
				}
			}
		})
		b.Run(fmt.Sprintf("%dB/ParseInput+Validate", len(in)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, v, err := schemas.ParseInput(raw)
				if d := s.Validate(v); d != nil || err != nil {
					b.Fatal(d, err)
				}
			}
		})
	}
}
