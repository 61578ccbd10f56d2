package schemas

import (
	"encoding/json"
	"testing"
)

// TestAttackFastBoundsTogether: a schema giving both minimum and
// exclusiveMinimum (or both maxima) must hold an input to both; the fast
// path kept one of the two, whichever the map gave last.
func TestAttackFastBoundsTogether(t *testing.T) {
	for _, c := range []struct{ schema, in string }{
		{`{"type":"object","properties":{"n":{"type":"integer","minimum":5,"exclusiveMinimum":3}}}`, `{"n":4}`},
		{`{"type":"object","properties":{"n":{"type":"integer","exclusiveMinimum":3,"minimum":5}}}`, `{"n":4}`},
		{`{"type":"object","properties":{"n":{"type":"integer","minimum":3,"exclusiveMinimum":5}}}`, `{"n":5}`},
		{`{"type":"object","properties":{"n":{"type":"integer","maximum":5,"exclusiveMaximum":9}}}`, `{"n":7}`},
		{`{"type":"object","properties":{"n":{"type":"integer","maximum":9,"exclusiveMaximum":5}}}`, `{"n":5}`},
	} {
		s, err := Compile(json.RawMessage(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		for range 50 { // map order varies from one compile to the next; the fast node is built once
			s.fast = buildFast(s.doc)
			checkAgrees(t, c.in, s)
			if _, v, _ := ParseInput(json.RawMessage(c.in)); s.Validate(v) == nil {
				t.Fatalf("%s accepted against %s", c.in, c.schema)
			}
		}
	}
}

// attackInputs are the hostile inputs of the session 26 red team: escaped
// and duplicate keys (which one the tool reads), keys that differ only by
// an escape, NUL, numbers past float64 and int64, -0, deep nesting,
// invalid UTF-8.
var attackInputs = []string{
	`{"n":1,"n":99}`, `{"n":99,"n":1}`, `{"\u006e":99,"n":1}`, `{"n":1,"\u006e":99}`, `{"s":"\u0000"}`, "{\"s\":\"a\x00\"}",
	`{"n":1e400}`, `{"n":-1e400}`, `{"n":1e-400}`, `{"n":-0}`, `{"n":-0.0}`, `{"n":0e0}`, `{"n":123456789012345678901234567890}`,
	`{"n":9223372036854775808}`, `{"n":-9223372036854775809}`, `{"n":1.0}`, `{"n":10E1}`, `{"n":5}`, `{"n":4}`, `{"n":9007199254740993}`,
	"{\"s\":\"\xff\"}", "{\"\xff\":1}", "{\"s\":\"\xed\xa0\x80\"}", `{"s":"\ud800"}`, `{"s":"\udc00\ud800"}`, `{"e":"a"}`, `{"e":"\u0061"}`,
	`{"e":"a","e":"b"}`, `{"s":"abcdef"}`, `{"s":"ab\u0063de"}`, `{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"a":{"b":{"c":{"d":{"e":{"f":{}}}}}},"n":1}`, `{"N":99,"n":1}`, `{"n":1,"x":1}`, `{"x":null}`, `{}`, `{"n":true}`, `{"n":"1"}`,
}

// attackSchemas are fast-path schemas with bounds, enums, lengths and
// closed objects for the inputs above.
var attackSchemas = []string{
	`{"type":"object","properties":{"n":{"type":"integer","minimum":-5,"maximum":5}},"additionalProperties":false}`,
	`{"type":"object","properties":{"n":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":10}}}`,
	`{"type":"object","properties":{"n":{"type":"integer","minimum":5,"exclusiveMinimum":3}}}`,
	`{"type":"object","properties":{"s":{"type":"string","maxLength":4},"e":{"enum":["a"]}}}`,
	`{"type":"object","properties":{"e":{"type":"string","enum":["a","b"]}},"required":["e"]}`,
	`{"type":"object","additionalProperties":{"type":"integer","maximum":9007199254740992}}`,
	`{"type":"object","properties":{"a":{"type":"array","items":{"type":"array"}}}}`,
	`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"integer","minimum":0}}}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"integer","maximum":3}}}`,
}

// FuzzAttackCheckInputSchema holds CheckInput to ParseInput and Validate
// with the schema fuzzed as well as the input: checkFast's schema side
// (buildFast) is what TestAttackFastBoundsTogether caught.
func FuzzAttackCheckInputSchema(f *testing.F) {
	for _, s := range attackSchemas {
		for _, in := range attackInputs {
			f.Add(s, in)
		}
	}
	f.Fuzz(func(t *testing.T, schema, in string) {
		s, err := Compile(json.RawMessage(schema))
		if err != nil || s.fast == nil {
			return
		}
		checkAgrees(t, in, s)
		s.fast = buildFast(s.doc) // another map order
		checkAgrees(t, in, s)
	})
}

// TestAttackCheckInputHostile: the hostile inputs against every attack
// schema, fast path or not, as FuzzCheckInput's seeds would.
func TestAttackCheckInputHostile(t *testing.T) {
	for _, raw := range attackSchemas {
		s, err := Compile(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range attackInputs {
			checkAgrees(t, in, s)
		}
	}
	for _, s := range checkInputSchemas(t) {
		for _, in := range attackInputs {
			checkAgrees(t, in, s)
		}
	}
}
