package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolbus/toolbus/schemas"
)

func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		testSchema,
		`{"type":"object"}`,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"enum":[1,"a",null]}}}`,
		`{"type":"object","properties":{"a":{"$ref":"http://x/y.json"}}}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"x":{"const":1}},"properties":{"a":{"$ref":"#/definitions/x"}}}`,
		`{"type":"object","$ref":"#"}`,
		`{"type":"object","patternProperties":{"^a":{"type":"string"}},"unevaluatedProperties":false}`,
		`{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"oneOf":[{"minimum":1},{"maximum":0}]}]}}}`,
		`[]`, `"x"`, `{`, ``,
	} {
		f.Add(s, `{"a":1,"b":"x","items":[{}]}`)
	}
	f.Fuzz(func(t *testing.T, raw, input string) {
		s, err := schemas.Compile(json.RawMessage(raw))
		if err != nil {
			if s != nil {
				t.Fatalf("Compile returned a schema and an error %v", err)
			}
			if !strings.HasPrefix(err.Error(), "schemas: ") {
				t.Fatalf("error without prefix: %v", err)
			}
			return
		}
		if !json.Valid(s.Raw()) || len(s.Raw()) > schemas.MaxSchemaBytes {
			t.Fatalf("Raw() = %q", s.Raw())
		}
		_, v, err := schemas.ParseInput(json.RawMessage(input))
		if err != nil {
			v = map[string]any{}
		}
		details := s.Validate(v)
		for i, d := range details {
			if !strings.HasPrefix(d.Path, "/") || d.Message == "" {
				t.Fatalf("bad detail %+v", d)
			}
			if i > 0 && details[i-1] == d {
				t.Fatalf("duplicate detail %+v", d)
			}
		}
	})
}

func FuzzParseInput(f *testing.F) {
	for _, s := range []string{
		`{"city":"Oslo"}`, `"{\"env\": \"prod\"}"`, `"[1]"`, `""`, `null`, ``, `42`, `[1]`, `true`,
		`{"a": [1, 2.5e3, {"b": "c d"}]}`, `"{ \"a\" : \"x\\ty\" }"`, `{} {}`, `"{"`, " \n{ }\t",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		b, v, err := schemas.ParseInput(json.RawMessage(raw))
		if err != nil {
			if b != nil || v != nil {
				t.Fatalf("ParseInput returned values with error %v", err)
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if _, ok := v.(map[string]any); !ok {
			t.Fatalf("value %T, want map[string]any", v)
		}
		if !json.Valid(b) || b[0] != '{' {
			t.Fatalf("raw %q is not a JSON object", b)
		}
		if utf8.Valid(b) { // invalid UTF-8 decodes lossily; skip the round trip then
			var again any
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.UseNumber()
			if err := dec.Decode(&again); err != nil {
				t.Fatalf("re-decode %q: %v", b, err)
			}
		}
		// Compact bytes stay compact.
		b2, _, err := schemas.ParseInput(b)
		if err != nil || string(b2) != string(b) {
			t.Fatalf("ParseInput(%q) = %q, %v; want it unchanged", b, b2, err)
		}
	})
}
