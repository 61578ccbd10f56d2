package schemas

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// checkInputCases are inputs CheckInput must judge exactly as ParseInput
// and Validate do, against each of fastSchemas, a schema outside the fast
// subset, and none.
var checkInputCases = []string{
	`{"city":"Oslo"}`, `{"city":"O"}`, `{"city":"Oslo","n":1.0}`, `{"city":"Oslo","n":2}`, `{"city":"Oslo","n":-2e3}`,
	`{"city":"Oslo","x":null,"u":"c","tags":["a"],"o":{"b":true}}`, `{"city":"Oslo","tags":[]}`, `{"city":"Oslo","tags":["a","b","c"]}`,
	`{"city":"Oslo","zz":1}`, `{"a":[1],"b":2,"c":"x"}`, `{"a":{"z":[{"q":"\u00e5"}]},"b":"x"}`, `{"s":"x"}`, `{"s":"x\ty"}`,
	`{"city":"ÅÅÅÅÅ"}`, `{"city":"ÅÅÅÅÅÅ"}`, `{"city":"Os\u006co"}`, `{"ci\u0074y":"Oslo"}`, `{"city":"Oslo","city":"O"}`,
	`{"city":"O","city":"Oslo"}`, `{"o":{"b":true,"c":1},"city":"xx"}`, `{"o":{"b":"no"},"city":"xx"}`, `{"o":{},"city":"xx"}`,
	`{"days":1}`, `{"days":0}`, `{"days":7}`, `{"days":8}`, `{"days":1.5}`, `{"days":"1"}`, `{"t":0}`, `{"t":10}`, `{"t":9.99}`,
	`{"t":-1e3}`, `{"units":"metric"}`, `{"units":"x"}`, `{"units":true}`, `{"a":false,"b":null}`, `{"b":true}`,
	` { "city" : "Oslo" } `, "{\n\"city\":\"Oslo\"}", `{}`, `{"a":[[[[1]]]]}`, `"{\"city\":\"Oslo\"}"`, `{"a":`, `{} {}`, `[1]`, `null`, ``,
	`{"city":"Oslo","tags":[1]}`, `{"city":"Oslo","x":"1"}`, `{"city":"Oslo","x":1}`, `{"a":{"b":{"c":{}}}}`,
}

// checkInputSchemas are fastSchemas, one schema the fast path does not
// cover, and no schema ("").
func checkInputSchemas(tb testing.TB) []*Schema {
	tb.Helper()
	out := []*Schema{nil}
	for _, raw := range append(slices.Clone(fastSchemas), `{"type":"object","properties":{"city":{"type":"string","pattern":"^O"}}}`) {
		s, err := Compile(json.RawMessage(raw))
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// checkTheLongWay is what CheckInput must return: ParseInput, then
// Validate.
func checkTheLongWay(raw json.RawMessage, s *Schema) (string, any, string) {
	in, v, err := ParseInput(raw)
	if err != nil {
		return "", nil, err.Error()
	}
	if s != nil {
		if problems := s.Validate(v); len(problems) > 0 {
			return "", problems, ""
		}
	}
	return string(in), nil, ""
}

func checkAgrees(t *testing.T, in string, s *Schema) {
	t.Helper()
	got, problems, err := CheckInput(json.RawMessage(in), s)
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	var gotProblems any
	if len(problems) > 0 {
		gotProblems = problems
	}
	wantIn, wantProblems, wantErr := checkTheLongWay(json.RawMessage(in), s)
	if string(got) != wantIn || errText != wantErr || !cmp.Equal(gotProblems, wantProblems) {
		name := "no schema"
		if s != nil {
			name = string(s.raw)
		}
		t.Fatalf("CheckInput(%q) against %s = %q, %v, %q; ParseInput and Validate give %q, %v, %q",
			in, name, got, gotProblems, errText, wantIn, wantProblems, wantErr)
	}
}

func TestCheckInputAgreesWithParseAndValidate(t *testing.T) {
	for _, s := range checkInputSchemas(t) {
		for _, in := range checkInputCases {
			checkAgrees(t, in, s)
		}
	}
}

// TestOKJSON is okJSON on its own, against the first of fastSchemas: true
// only where the decoded value certainly satisfies the schema, false
// where it does not or where only a decode can tell.
func TestOKJSON(t *testing.T) {
	s, err := Compile(json.RawMessage(fastSchemas[0]))
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]bool{
		`{"city":"Oslo"}`:                   true,
		`{"city":"Oslo","tags":["a","b"]}`:  true,
		`{"city":"Oslo","o":{"b":false}}`:   true,
		`{"city":"Oslo","n":12,"x":null}`:   true,
		`{"city":"Oslo","x":1.5e3}`:         true,
		`{"city":"O"}`:                      false, // too short
		`{"n":1}`:                           false, // city is required
		`{"city":"Oslo","zz":1}`:            false, // no additional properties
		`{"city":"Oslo","n":1.5}`:           false, // not an integer
		`{"city":"Oslo","u":"k"}`:           false, // not in the enum
		`{"city":"Oslo","tags":[]}`:         false, // too few items
		`{"city":"Oslo","tags":["a",1]}`:    false, // an item is no string
		`{"city":"Oslo","o":{}}`:            false, // b is required
		`{"city":"Os\u006co"}`:              false, // an escape where the content counts: decode
		`{"ci\u0074y":"Oslo"}`:              false, // an escaped key: decode
		`{"city":"Øslo"}`:                   false, // outside ASCII where the content counts: decode
		`{"city":"Oslo","city":"O"}`:        false, // each occurrence is judged
		`{"city":"Oslo","tags":["\u00e5"]}`: true,  // the content does not count
	} {
		end, ok := s.fast.okJSON([]byte(in), 0)
		if ok != want || ok && end != len(in) {
			t.Errorf("okJSON(%s) = %d, %v; want %v (and the end, %d)", in, end, ok, want, len(in))
		}
		if !ok {
			continue
		}
		if _, v, err := ParseInput(json.RawMessage(in)); err != nil || !s.fast.ok(v) {
			t.Errorf("okJSON accepted %s, ok refuses its decoded value (%v)", in, err)
		}
	}
}

// TestCheckInputAllocations: the usual input, checked from its bytes,
// costs no allocation with a schema on the fast path or with none.
func TestCheckInputAllocations(t *testing.T) {
	s, err := Compile(json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`))
	if err != nil {
		t.Fatal(err)
	}
	in := json.RawMessage(`{"text":"hello"}`)
	for _, sch := range []*Schema{s, nil} {
		if n := testing.AllocsPerRun(100, func() {
			if _, problems, err := CheckInput(in, sch); err != nil || problems != nil {
				t.Fatal(err, problems)
			}
		}); n != 0 {
			t.Errorf("CheckInput allocates %v times per input, want 0", n)
		}
	}
}

// FuzzCheckInput holds CheckInput to ParseInput and Validate on any input.
func FuzzCheckInput(f *testing.F) {
	for _, in := range checkInputCases {
		f.Add(in)
	}
	compiled := checkInputSchemas(f)
	f.Fuzz(func(t *testing.T, in string) {
		for _, s := range compiled {
			checkAgrees(t, in, s)
		}
	})
}
