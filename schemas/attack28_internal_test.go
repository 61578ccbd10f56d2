package schemas

import (
	"encoding/json"
	"regexp/syntax"
	"strings"
	"testing"
	"time"
)

// TestAttackRegexProgramSize (session 28, red team): a schema whose
// patterns compile into millions of instructions (a 21 KB "a{1000}" × 3000
// took 2-4 s and 1.4 GB allocated per compile, 270 MB held) or hold
// thousands of Unicode classes (60 KB of "[\pL\pN]" took 1.9 s to parse) is
// refused before anything is compiled, in milliseconds; patterns real tools
// use pass. See router TestAttackRegexProgramSize for the request-scoped
// path.
func TestAttackRegexProgramSize(t *testing.T) {
	schema := func(props map[string]any) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
		return b
	}
	pattern := func(p string) map[string]any { return map[string]any{"type": "string", "pattern": p} }
	many := map[string]any{}
	for i := range 60 {
		many[strings.Repeat("p", i+1)] = pattern(`^a{100}$`) // 60 × 101: the budget is the schema's
	}
	for name, raw := range map[string]json.RawMessage{
		"repeats":     schema(map[string]any{"x": pattern(strings.Repeat("a{1000}", 3000))}),
		"classes":     schema(map[string]any{"x": pattern(strings.Repeat(`[\pL\pN]`, 6000))}),
		"class rep":   schema(map[string]any{"x": pattern(strings.Repeat(`\pL{1000}`, 20))}),
		"any rep":     schema(map[string]any{"x": pattern(strings.Repeat(`.{1000}`, 20))}),
		"nested":      schema(map[string]any{"x": pattern(`((a{100}){100})`)}),
		"alternation": schema(map[string]any{"x": pattern(strings.Repeat(`(x{500}|y{500})`, 10))}),
		"spread":      schema(many),
		"keys":        json.RawMessage(`{"type":"object","patternProperties":{"` + strings.Repeat(`b{1000}`, 100) + `":{}}}`),
	} {
		start := time.Now()
		_, err := Compile(raw)
		if err == nil || !strings.Contains(err.Error(), "pattern") {
			t.Errorf("%s: %v", name, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: refused in %v", name, took)
		}
	}
	for _, p := range []string{`^[a-z0-9-]{1,63}$`, `^\d{4}-\d{2}-\d{2}$`, `^[\p{L}\p{N}_-]+$`, `^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,255}$`,
		`^(?:[01]?\d|2[0-3]):[0-5]\d$`, `^https?://[^\s/$.?#].[^\s]*$`, `^[0-9a-f]{40}$`, `(?i)^(get|post|put|delete)$`} {
		if _, err := Compile(schema(map[string]any{"x": pattern(p)})); err != nil {
			t.Errorf("%s refused: %v", p, err)
		}
	}
	// The estimate is never below what Go compiles (less the program's own
	// fail and match instructions).
	for _, p := range []string{`a{1000}`, `(ab){10,20}`, `[a-z]{1,63}`, `x*y+z?`, `(a|bc|def){5}`, `\pL{50}`, `(?i)k{30}`, `a{2,}`, `^(?:[01]?\d|2[0-3])$`, `héllo{3}`} {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		if est := programSize(re); est+2 < len(prog.Inst) {
			t.Errorf("%s: estimated %d instructions, Go compiles %d", p, est, len(prog.Inst))
		}
	}
}

// TestAttackRegexFormat (session 28, red team): a tool whose schema
// asserts the "regex" format (a draft-07 schema does, as many MCP servers
// send) had the validator compile every such input string: a model's
// 21 KB "a{1000}" × 3000 cost the router 2 s and 700 MB a value. The
// format now parses the expression (what says whether it is one) and
// never compiles it.
func TestAttackRegexFormat(t *testing.T) {
	s, err := Compile(json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",` +
		`"properties":{"re":{"type":"string","format":"regex"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	check := func(re string) []string {
		in, _ := json.Marshal(map[string]string{"re": re})
		_, v, err := ParseInput(in)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range s.Validate(v) {
			out = append(out, d.Message)
		}
		return out
	}
	start := time.Now()
	if d := check(strings.Repeat("a{1000}", 3000)); len(d) != 0 {
		t.Errorf("a valid expression refused: %v", d)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("one value took %v", took)
	}
	if d := check("("); len(d) != 1 {
		t.Errorf(`"(": %v`, d)
	}
	if d := check(strings.Repeat(`\pL`, MaxPatternClasses+1)); len(d) != 1 {
		t.Errorf("too many classes: %v", d)
	}
}
