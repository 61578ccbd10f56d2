package schemas

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

func TestJSONDepth(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`1`, 0},
		{`"x"`, 0},
		{`{}`, 1},
		{`[]`, 1},
		{`{"a":[1,{"b":[]}]}`, 4},
		{`[[],[[]],[]]`, 3},
		{`{"a":"{[{[{["}`, 1},          // brackets in strings do not count
		{`{"a":"\"{[","b":{}}`, 2},     // nor after an escaped quote
		{`{"a":"\\","b":{"c":{}}}`, 3}, // an escaped backslash ends before the quote
		{`{"{":{"}":{"]":[]}}}`, 4},    // nor in keys
		{strings.Repeat("[", 200) + strings.Repeat("]", 200), 11}, // stops past the limit
	}
	for _, tt := range tests {
		if got := jsonDepth([]byte(tt.in), 10); got != tt.want {
			t.Errorf("jsonDepth(%.40q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestLevels(t *testing.T) {
	deep := func(n int) any { // n nested objects
		var v any = map[string]any{}
		for i := 1; i < n; i++ {
			v = map[string]any{"a": v}
		}
		return v
	}
	tests := []struct {
		name   string
		v      any
		counts []int
		ok     bool
	}{
		{"scalar", json.Number("1"), []int{1}, true},
		{"empty object", map[string]any{}, []int{1}, true},
		{"object", map[string]any{"a": "x", "b": []any{true, nil}}, []int{1, 2, 2}, true},
		{"at the limit", deep(MaxInputDepth), nil, true},
		{"one over", deep(MaxInputDepth + 1), nil, false},
		{"empty array one over", map[string]any{"a": deep(MaxInputDepth - 1).(map[string]any), "b": []any{}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts, ok := levels(tt.v)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if tt.counts != nil && !equal(counts, tt.counts) {
				t.Fatalf("counts = %v, want %v", counts, tt.counts)
			}
		})
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzJSONDepth holds the scanner to a recursive reference on valid JSON,
// and levels to the scanner on the decoded value.
func FuzzJSONDepth(f *testing.F) {
	for _, s := range []string{`{}`, `[1,[2,[3]]]`, `{"a":"[{","b":{"c":["\\",{}]}}`, `"x"`, `{"\"":{"\\\"":[]}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		if !json.Valid(b) {
			jsonDepth(b, MaxInputDepth) // must not panic or loop
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return
		}
		want := refDepth(v)
		if got := jsonDepth(b, 1<<30); got != want {
			t.Fatalf("jsonDepth(%q) = %d, want %d", s, got, want)
		}
		counts, ok := levels(v)
		if ok != (want <= MaxInputDepth) {
			t.Fatalf("levels ok = %v for depth %d", ok, want)
		}
		if ok {
			n := 0
			for _, c := range counts {
				n += c
			}
			if n != refCount(v) {
				t.Fatalf("levels counted %d values, want %d", n, refCount(v))
			}
		}
	})
}

func refDepth(v any) int {
	d := 0
	switch x := v.(type) {
	case map[string]any:
		for _, m := range x {
			d = max(d, refDepth(m))
		}
		return d + 1
	case []any:
		for _, m := range x {
			d = max(d, refDepth(m))
		}
		return d + 1
	}
	return 0
}

func refCount(v any) int {
	n := 1
	switch x := v.(type) {
	case map[string]any:
		for _, m := range x {
			n += refCount(m)
		}
	case []any:
		for _, m := range x {
			n += refCount(m)
		}
	}
	return n
}

// TestMultipliers: the estimate follows the references that multiply work.
func TestMultipliers(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		want   []int64 // prefix of mult
	}{
		{"flat", `{"type":"object","properties":{"a":{"type":"string"},"b":{}}}`, []int64{1, 1, 0}},
		{"allOf twice the same ref", `{"type":"object","allOf":[{"$ref":"#/$defs/x"},{"$ref":"#/$defs/x"}],"$defs":{"x":{"minProperties":1}}}`, []int64{5, 0}},
		{"recursive tree", `{"type":"object","properties":{"c":{"type":"array","items":{"$ref":"#"}}}}`, []int64{1, 1, 2, 1, 2}},
		{"doubling per level", `{"type":"object","anyOf":[{"properties":{"a":{"$ref":"#"}}},{"properties":{"a":{"$ref":"#"}}}]}`, []int64{3, 8, 16, 32}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := jsonschema.NewCompiler()
			c.Draft = jsonschema.Draft2020
			if err := c.AddResource(schemaURL, strings.NewReader(tt.schema)); err != nil {
				t.Fatal(err)
			}
			sch, err := c.Compile(schemaURL)
			if err != nil {
				t.Fatal(err)
			}
			g, err := buildGraph(sch)
			if err != nil {
				t.Fatal(err)
			}
			mult := g.multipliers(sch)
			for d, w := range tt.want {
				if mult[d] != w {
					t.Fatalf("mult = %v, want prefix %v", mult[:len(tt.want)], tt.want)
				}
			}
		})
	}
}

// FuzzCompactValue holds compactValue to the three passes it replaces in
// checkFast: b is one compact JSON value nested no deeper than the limit
// exactly when json.Valid and jsonDepth say so and json.Compact keeps b.
func FuzzCompactValue(f *testing.F) {
	for _, s := range compactCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		compactAgrees(t, []byte(s))
	})
}

var compactCases = []string{
	`{"text":"hello"}`, `{}`, `[]`, `[[[]]]`, `[[[[]]]]`, `{"a":[1,-0.5e+3,true,false,null,"\u00e9\n\"\\\/"]}`,
	`{"a" :1}`, `{"a": 1}`, ` {}`, `{} `, `{"a":"x y"}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-}`,
	`{"a":tru}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"` + "\x01" + `"}`, `{"a":"` + "\xff" + `"}`,
	`{"a":1,}`, `[1,]`, `{"a"}`, `{1:2}`, `{"a":1}}`, `"x"`, `12`, `{"a":[}`, `{"a":1`, `[1 2]`,
}

// compactAgrees fails t when compactValue and the passes it replaces
// differ on b, with 3 as the depth limit.
func compactAgrees(t *testing.T, b []byte) {
	t.Helper()
	var compact bytes.Buffer
	want := json.Valid(b) && jsonDepth(b, 3) <= 3 && json.Compact(&compact, b) == nil && bytes.Equal(compact.Bytes(), b)
	if got := compactValue(b, 0, 3) == len(b); got != want {
		t.Fatalf("compactValue(%q) accepts: %v, want %v", b, got, want)
	}
}

func TestCompactValue(t *testing.T) {
	for _, s := range compactCases {
		compactAgrees(t, []byte(s))
	}
}
