package schemas

import (
	"encoding/json"
	"testing"
)

var fastSchemas = []string{
	`{"type":"object","properties":{"city":{"type":"string","minLength":2,"maxLength":5},"n":{"type":"integer"},"x":{"type":["number","null"]},"u":{"type":"string","enum":["c","f"]},"tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":2},"o":{"type":"object","properties":{"b":{"type":"boolean"}},"required":["b"],"additionalProperties":false}},"required":["city"],"additionalProperties":false}`,
	`{"type":"object","properties":{"a":{}},"additionalProperties":{"type":"integer"}}`,
	`{"type":"object","description":"d","title":"t","properties":{"s":{"type":"string","default":"x","examples":["y"]}}}`,
	`{"type":"object","properties":{"days":{"type":"integer","minimum":1,"maximum":7},"t":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":10},"units":{"enum":["metric","imperial"]}}}`,
}

// FuzzFastPathAgreesWithValidator holds the fast path to the full validator:
// whenever it accepts an instance, the validator must accept it too.
func FuzzFastPathAgreesWithValidator(f *testing.F) {
	for _, in := range []string{`{"city":"Oslo"}`, `{"city":"O"}`, `{"city":"Oslo","n":1.0}`, `{"city":"Oslo","n":2}`,
		`{"city":"Oslo","x":null,"u":"c","tags":["a"],"o":{"b":true}}`, `{"city":"Oslo","tags":[]}`, `{"city":"Oslo","zz":1}`,
		`{"a":[1],"b":2,"c":"x"}`, `{"s":"x"}`, `{"city":"ÅÅÅÅÅ"}`, `{"city":"ÅÅÅÅÅÅ"}`, `{"o":{"b":true,"c":1},"city":"xx"}`,
		`{"days":1}`, `{"days":0}`, `{"days":7}`, `{"days":8}`, `{"days":1.5}`, `{"t":0}`, `{"t":10}`, `{"t":9.99}`, `{"t":-1e3}`, `{"units":"metric"}`, `{"units":"x"}`} {
		f.Add(in)
	}
	var compiled []*Schema
	for _, raw := range fastSchemas {
		s, err := Compile(json.RawMessage(raw))
		if err != nil {
			f.Fatal(err)
		}
		if s.fast == nil {
			f.Fatalf("schema outside the fast subset: %s", raw)
		}
		compiled = append(compiled, s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		_, v, err := ParseInput(json.RawMessage(in))
		if err != nil {
			return
		}
		for _, s := range compiled {
			if s.fast.ok(v) && s.sch.Validate(v) != nil {
				t.Fatalf("fast path accepted %s, the validator refuses it (schema %s)", in, s.raw)
			}
		}
	})
}

func TestFastSubset(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"type":"object","properties":{"a":{"type":"string"}}}`:                      true,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}}}`:                   false,
		`{"type":"object","properties":{"a":{"type":"string","format":"date-time"}}}`: false,
		`{"type":"object","properties":{"a":{"minimum":1}}}`:                          true,
		`{"type":"object","properties":{"a":{"minimum":1.5}}}`:                        false,
		`{"type":"object","properties":{"a":{"enum":[1,2]}}}`:                         false,
		`{"type":"object","properties":{"a":true}}`:                                   false,
	} {
		s, err := Compile(json.RawMessage(raw))
		if err != nil {
			continue // e.g. an unresolved $ref: not this test's business
		}
		if (s.fast != nil) != want {
			t.Errorf("fast path for %s: %v, want %v", raw, s.fast != nil, want)
		}
	}
}
