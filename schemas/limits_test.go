package schemas_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schemas"
)

// nestedInput returns an input object nesting depth levels.
func nestedInput(depth int, leaf string) string {
	return strings.Repeat(`{"a":`, depth-1) + `{"b":` + leaf + `}` + strings.Repeat(`}`, depth-1)
}

// generous bounds a cost test's wall time on a loaded machine under -race;
// the benchmark (BenchmarkLimits) reports the real figures.
const generous = 20 * time.Second

func TestSchemaDepthLimit(t *testing.T) {
	start := time.Now()
	s, err := schemas.Compile(json.RawMessage(atDepth(schemas.MaxSchemaDepth)))
	if err != nil {
		t.Fatalf("a schema at the depth limit: %v", err)
	}
	if d := time.Since(start); d > generous {
		t.Fatalf("compiling at the depth limit took %v", d)
	}
	if s.Subschemas() == 0 {
		t.Fatal("no subschemas counted")
	}
	_, err = schemas.Compile(json.RawMessage(atDepth(schemas.MaxSchemaDepth + 1)))
	want := fmt.Sprintf("schemas: schema nests deeper than %d levels of objects and arrays", schemas.MaxSchemaDepth)
	if err == nil || err.Error() != want {
		t.Fatalf("one level over: %v, want %q", err, want)
	}
	// What the attack sent: 3,200 levels, refused at once.
	start = time.Now()
	attack := `{"type":"object","items":` + strings.Repeat(`{"items":`, 3200) + `{}` + strings.Repeat(`}`, 3201)
	if _, err := schemas.Compile(json.RawMessage(attack)); err == nil || err.Error() != want {
		t.Fatalf("3,200 levels: %v", err)
	}
	if d := time.Since(start); d > generous {
		t.Fatalf("refusing took %v", d)
	}
}

// atDepth returns an object schema whose JSON nests exactly depth levels:
// properties levels (two each), and an enum array for an odd one.
func atDepth(depth int) string {
	s, tail := `{}`, `}`
	if (depth-1)%2 == 1 {
		s, tail = `{"enum":[1]}`, `,"enum":[1]}`
	}
	k := (depth - 1) / 2
	if k == 0 {
		return `{"type":"object"` + tail
	}
	for range k - 1 {
		s = `{"properties":{"a":` + s + `}}`
	}
	return `{"type":"object","properties":{"a":` + s + `}}`
}

func TestAtDepthHelper(t *testing.T) {
	for _, d := range []int{1, 2, 3, 4, 5, 64, 65} {
		s := atDepth(d)
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("atDepth(%d) = %s: %v", d, s, err)
		}
		if got := depthOf(v); got != d {
			t.Fatalf("atDepth(%d) nests %d: %s", d, got, s)
		}
	}
}

func depthOf(v any) int {
	d := 0
	switch x := v.(type) {
	case map[string]any:
		for _, m := range x {
			d = max(d, depthOf(m))
		}
		return d + 1
	case []any:
		for _, m := range x {
			d = max(d, depthOf(m))
		}
		return d + 1
	}
	return 0
}

func TestInputDepthLimit(t *testing.T) {
	want := fmt.Sprintf("input nests deeper than %d levels of objects and arrays", schemas.MaxInputDepth)
	if _, _, err := schemas.ParseInput(json.RawMessage(nestedInput(schemas.MaxInputDepth, "1"))); err != nil {
		t.Fatalf("an input at the limit: %v", err)
	}
	for _, in := range []string{
		nestedInput(schemas.MaxInputDepth, "[]"),
		nestedInput(10_000, "1"),
	} {
		if _, _, err := schemas.ParseInput(json.RawMessage(in)); err == nil || err.Error() != want {
			t.Fatalf("an input over the limit: %v, want %q", err, want)
		}
		quoted, _ := json.Marshal(in) // the string-holding form
		if _, _, err := schemas.ParseInput(quoted); err == nil || err.Error() != want {
			t.Fatalf("a string holding an input over the limit: %v", err)
		}
	}
}

// TestDeepInvalidRecursiveInstance: the attack's shape (a recursive schema,
// an invalid leaf at the bottom) answers fast: with the leaf's problem at a
// moderate depth, as too costly at the input depth limit (where the
// validator's location strings make each check cost dozens of shallow
// ones).
func TestDeepInvalidRecursiveInstance(t *testing.T) {
	s := mustCompile(t, `{"type":"object","properties":{"a":{"$ref":"#"},"b":{"type":"string"}},"additionalProperties":false}`)
	for _, tt := range []struct {
		depth      int
		path, want string
	}{
		{40, strings.Repeat("/a", 39) + "/b", "expected string, but got number"},
		{schemas.MaxInputDepth, "/", "input is too costly to check against this schema: about 4385 subschema checks for its 129 values, more than the limit of 3064"},
	} {
		_, v, err := schemas.ParseInput(json.RawMessage(nestedInput(tt.depth, "1")))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		details := s.Validate(v)
		if d := time.Since(start); d > generous {
			t.Fatalf("took %v", d)
		}
		if len(details) != 1 || details[0].Path != tt.path || details[0].Message != tt.want {
			t.Fatalf("depth %d: details %+v, want %s: %s", tt.depth, details, tt.path, tt.want)
		}
	}
}

func TestCostlySchemas(t *testing.T) {
	chain := func(levels int) string { // each level doubles the checks of the next
		var b strings.Builder
		b.WriteString(`{"type":"object","$ref":"#/$defs/d0","$defs":{`)
		for i := 0; i < levels; i++ {
			fmt.Fprintf(&b, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
		}
		fmt.Fprintf(&b, `"d%d":{"type":"object"}}}`, levels)
		return b.String()
	}
	tests := []struct {
		name, schema, want string
	}{
		{"doubling in place", chain(30), "schemas: schema is too costly to validate: an input value at depth 0 may be checked against "},
		{"doubling per level", `{"type":"object","anyOf":[{"properties":{"a":{"$ref":"#"}}},{"properties":{"a":{"$ref":"#"}}}]}`,
			"schemas: schema is too costly to validate: an input value at depth 6 may be checked against 256 subschemas (references multiply them), more than the limit of 250"},
		{"in-place cycle", `{"type":"object","allOf":[{"$ref":"#/$defs/a"}],"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"}]},"b":{"not":{"$ref":"#/$defs/a"}}}}`, "loop"},
		{"too many subschemas", `{"type":"object","allOf":[` + strings.Repeat(`{},`, schemas.MaxSubschemas) + `{}]}`,
			fmt.Sprintf("schemas: schema has more than %d subschemas", schemas.MaxSubschemas)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := schemas.Compile(json.RawMessage(tt.schema))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			if d := time.Since(start); d > generous {
				t.Fatalf("took %v", d)
			}
		})
	}
	if _, err := schemas.Compile(json.RawMessage(chain(5))); err != nil { // 126 checks: allowed
		t.Fatalf("chain of 5: %v", err)
	}
	var props strings.Builder
	for i := range schemas.MaxSubschemas - 1 {
		fmt.Fprintf(&props, `,"p%d":{}`, i)
	}
	if _, err := schemas.Compile(json.RawMessage(`{"type":"object","properties":{` + props.String()[1:] + `}}`)); err != nil {
		t.Fatalf("at the subschema limit: %v", err)
	}
}

// TestCostlyInput: an input whose estimated checks pass its budget is an
// invalid_input detail, before the validator runs.
func TestCostlyInput(t *testing.T) {
	// Every member of the root is checked against 243 subschemas.
	s := mustCompile(t, `{"type":"object","additionalProperties":{"$ref":"#/$defs/x"},"$defs":{"x":{"allOf":[`+strings.Repeat(`{"type":"string"},`, 240)+`{}]}}}`)
	members := func(n int) any {
		m := map[string]any{}
		for i := range n {
			m[fmt.Sprint("k", i)] = json.Number("1")
		}
		return m
	}
	if d := s.Validate(members(3)); len(d) != 3 || d[0].Message != "expected string, but got number" { // 912 of 1064
		t.Fatalf("three members: %+v", d)
	}
	if d := s.Validate(members(4)); len(d) != 1 || !strings.HasPrefix(d[0].Message, "input is too costly") { // 1216 of 1080
		t.Fatalf("four members: %+v", d)
	}
	d := s.Validate(members(50))
	want := "input is too costly to check against this schema: about 15188 subschema checks for its 51 values, more than the limit of 1816"
	if len(d) != 1 || d[0].Path != "/" || d[0].Message != want {
		t.Fatalf("fifty members: %+v, want %q", d, want)
	}
}

func TestDetailsBounded(t *testing.T) {
	s := mustCompile(t, `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`)
	_, v, err := schemas.ParseInput(json.RawMessage(`{"a":[` + strings.Repeat(`1,`, 999) + `1]}`))
	if err != nil {
		t.Fatal(err)
	}
	d := s.Validate(v)
	if len(d) != schemas.MaxDetails || d[len(d)-1].Message != "and 901 more problems" {
		t.Fatalf("%d details, last %+v", len(d), d[len(d)-1])
	}
}

// TestCompileOnce: the same schema compiled again, in any spelling, is the
// cached one.
func TestCompileOnce(t *testing.T) {
	raw := `{"type":"object","properties":{"once":{"type":"string","description":"` + fmt.Sprint(time.Now().UnixNano()) + `"}}}`
	_, misses0, _ := schemas.CacheStats()
	first := mustCompile(t, raw)
	for i := range 1000 {
		spelled := raw
		if i%2 == 1 {
			spelled = strings.ReplaceAll(raw, ":", ": ")
		}
		if s := mustCompile(t, spelled); s != first {
			t.Fatal("compiled again")
		}
	}
	if _, misses, _ := schemas.CacheStats(); misses-misses0 != 1 {
		t.Fatalf("%d compiles, want 1", misses-misses0)
	}
	// Refusals are cached too.
	bad := atDepth(schemas.MaxSchemaDepth + 1)
	_, misses0, _ = schemas.CacheStats()
	for range 10 {
		if _, err := schemas.Compile(json.RawMessage(bad)); err == nil {
			t.Fatal("accepted")
		}
	}
	if _, misses, _ := schemas.CacheStats(); misses-misses0 > 1 {
		t.Fatalf("%d compiles of a refused schema", misses-misses0)
	}
}
