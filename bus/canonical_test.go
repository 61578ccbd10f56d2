package bus

import (
	"bytes"
	"encoding/json"
	"math/big"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// canonicalCorpus is inputs in groups: the inputs of a group hold one JSON
// value, and no two groups hold the same one.
var canonicalCorpus = [][]string{
	{`{"a":1,"b":2}`, `{"b":2,"a":1}`, ` { "b" : 2 ,	"a" : 1 } `, "{\n\"a\":1,\r\n\"b\":2}", `"{\"b\":2,\"a\":1}"`},
	{`{"a":2,"b":1}`},
	{`{"a":1}`, `{"a":1.0}`, `{"a":1e0}`, `{"a":1E0}`, `{"a":1e+0}`, `{"a":10e-1}`, `{"a":0.1e1}`, `{"a":100e-2}`, `{"a":1.000}`, `{"a":0.00001e5}`},
	{`{"a":-1}`, `{"a":-1.0}`, `{"a":-1e0}`},
	{`{"a":0}`, `{"a":-0}`, `{"a":0.0}`, `{"a":0e7}`, `{"a":-0.0e-3}`},
	{`{"a":9007199254740993}`, `{"a":9007199254740993.0}`, `{"a":9.007199254740993e15}`},
	{`{"a":9007199254740992}`, `{"a":9.007199254740992e15}`}, // one float64 with the group above, another value
	{`{"a":123456789012345678901234567890}`, `{"a":1.2345678901234567890123456789e29}`},
	{`{"a":123456789012345678901234567891}`},
	{`{"a":1e21}`, `{"a":1000000000000000000000}`, `{"a":10e20}`},
	{`{"a":1e400}`, `{"a":10e399}`},    // past float64: still a value
	{`{"a":1e-400}`, `{"a":0.1e-399}`}, // and another
	{`{"a":0.5}`, `{"a":5e-1}`, `{"a":0.50}`},
	{`{"a":1.5e-7}`, `{"a":0.00000015}`},
	{`{"a":"1"}`}, // a string, not a number
	{`{"a":"é\/<b>"}`, `{"a":"\u00e9/\u003cb\u003e"}`, `{"a":"\u00E9\/\u003Cb\u003E"}`},
	{`{"a":"😀"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\uD83D\uDE00"}`},
	{`{"a":"\ud83d"}`, `{"a":"\uD83D"}`}, // a lone surrogate is itself,
	{`{"a":"\ufffd"}`, `{"a":"�"}`},      // not the replacement character
	{`{"a":"x\ny\"z\\"}`, `{"a":"x\u000ay\u0022z\u005c"}`},
	{`{"a":"\u0001"}`, `{"a":"\u0001"}`},
	{`{"é":1,"e":2}`, `{"e":2,"\u00e9":1}`},
	{`{"a":{"x":[1,{"q":true,"p":null}],"y":"z"},"b":[]}`, `{"b":[ ],"a":{"y":"z","x":[1.0,{"p":null,"q":true}]}}`},
	{`{"a":{"x":[{"p":null,"q":true},1],"y":"z"},"b":[]}`}, // array order is significant
	{`{"a":[1,2]}`, `{"a":[1.0,2e0]}`},
	{`{"a":[2,1]}`},
	{`{"a":{}}`, `{"a":{ }}`},
	{`{"a":[]}`},
	{`{"a":null}`},
	{`{"a":false}`},
	{`{}`, ``, `  `, `"{}"`, `" { } "`},
	{`{"a":1,"a":2}`},                              // a name twice: equal only to itself,
	{`{"a":2,"a":1}`},                              // in the order sent,
	{`{"a":2}`},                                    // not the last one alone,
	{`{"a":1,"b":0,"a":2}`, `{"b":0,"a":1,"a":2}`}, // though other members may move
	{`{"a":1e9999999999999999}`},                   // an exponent past 15 digits stays as sent
	{`{"a":10e9999999999999998}`},
	{`{"a":`}, // not JSON: itself
	{`{"a":01}`},
	{`{"a":1,}`},
}

// TestCallDigestIsSameInput: over the corpus, two calls of one tool have the
// same CallDigest exactly when SameCalls takes one for the other, and that
// is exactly when their inputs are in one group (docs/protocol.md 3.1,
// 1.13: members in any order, white space, numbers by value, escapes).
func TestCallDigestIsSameInput(t *testing.T) {
	type input struct {
		group int
		text  string
	}
	var all []input
	for g, texts := range canonicalCorpus {
		for _, s := range texts {
			all = append(all, input{g, s})
		}
	}
	for _, a := range all {
		for _, b := range all {
			same := SameCalls("r", []Call{{ID: "c", Name: "t", Input: json.RawMessage(a.text)}}, []Call{{ID: "c", Name: "t", Input: json.RawMessage(b.text)}}) == nil
			digests := callDigest("t", json.RawMessage(a.text)) == callDigest("t", json.RawMessage(b.text))
			if want := a.group == b.group; same != want || digests != want {
				t.Errorf("%s and %s: SameCalls %v, digests equal %v, want %v (canonical %s and %s)",
					a.text, b.text, same, digests, want, CanonicalInput(json.RawMessage(a.text)), CanonicalInput(json.RawMessage(b.text)))
			}
		}
	}
	if callDigest("t", json.RawMessage(`{"a":1}`)) == callDigest("u", json.RawMessage(`{"a":1}`)) {
		t.Error("the digest leaves the tool out")
	}
}

// The canonical form of a few values, as written: ECMAScript's layout of
// numbers, escapes, sorted members.
func TestCanonicalForm(t *testing.T) {
	for in, want := range map[string]string{
		`{"b":[1.50, 2E+2, -3e-7, 12e20, 123e19],"a":"\u00e9\/\t"}`: `{"a":"é/\t","b":[1.5,200,-3e-7,1.2e+21,1.23e+21]}`,
		`{"x":0.000001,"y":0.0000001,"z":-0}`:                       `{"x":0.000001,"y":1e-7,"z":0}`,
		`{"k":"\ud83d\u0041","l":"\ud83dx"}`:                        `{"k":"\ud83dA","l":"\ud83dx"}`,
		`{"ab":1,"a":2,"a!":3}`:                                     `{"a!":3,"a":2,"ab":1}`,
	} {
		if got := string(CanonicalInput(json.RawMessage(in))); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

// FuzzCallDigest checks the property TestCallDigestIsSameInput checks on a
// corpus on any two inputs: digests equal exactly when SameCalls says the
// same; and, where an independent reading can judge (both JSON, UTF-8 with
// no lone surrogate, no name twice, exponents small enough for big.Rat),
// exactly when the two hold the same JSON value; and the canonical form is
// JSON holding the input's value, a fixed point of itself.
func FuzzCallDigest(f *testing.F) {
	for _, g := range canonicalCorpus {
		for i, s := range g {
			f.Add(s, g[(i+1)%len(g)])
		}
	}
	f.Add(`{"a":[1,{"b":"c"}]}`, `{"a":[1,{"b":"d"}]}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		da, db := callDigest("t", json.RawMessage(a)), callDigest("t", json.RawMessage(b))
		same := SameCalls("r", []Call{{ID: "c", Name: "t", Input: json.RawMessage(a)}}, []Call{{ID: "c", Name: "t", Input: json.RawMessage(b)}}) == nil
		if same != (da == db) {
			t.Fatalf("%q and %q: SameCalls %v, digests equal %v", a, b, same, da == db)
		}
		va, oka := judge(a)
		vb, okb := judge(b)
		if oka {
			ca := CanonicalInput(json.RawMessage(a))
			if vc, ok := judge(string(ca)); !ok || !equalValues(va, vc) {
				t.Fatalf("%q: canonical %q holds another value", a, ca)
			}
			if again := CanonicalInput(ca); !bytes.Equal(again, ca) {
				t.Fatalf("%q: canonical %q, and again %q", a, ca, again)
			}
		}
		if oka && okb && equalValues(va, vb) != same {
			t.Fatalf("%q and %q: same value %v, SameCalls %v (canonical %q and %q)", a, b, !same, same,
				CanonicalInput(json.RawMessage(a)), CanonicalInput(json.RawMessage(b)))
		}
	})
}

// judge reads s as SameCalls reads an input (a string as the JSON it holds,
// empty as {}) with encoding/json, numbers as json.Number; ok false where
// that reading cannot judge: not JSON, not UTF-8, a lone surrogate or a
// replacement character (encoding/json turns both into U+FFFD), a name
// twice (it keeps the last), an exponent past ±1000, nesting past 100.
func judge(s string) (any, bool) {
	raw := strings.TrimSpace(s)
	if strings.HasPrefix(raw, `"`) {
		var inner string
		if json.Unmarshal([]byte(raw), &inner) == nil {
			raw = strings.TrimSpace(inner)
		}
	}
	if raw == "" {
		raw = "{}"
	}
	if !utf8.ValidString(raw) || !json.Valid([]byte(raw)) {
		return nil, false
	}
	d := json.NewDecoder(strings.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil, false
	}
	ok := true
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		if depth > 100 {
			ok = false
			return
		}
		switch v := v.(type) {
		case string:
			ok = ok && !strings.ContainsRune(v, utf8.RuneError)
		case json.Number:
			if i := strings.IndexAny(string(v), "eE"); i >= 0 {
				e := strings.TrimLeft(string(v)[i+1:], "+-0")
				ok = ok && len(e) < 4
			}
		case []any:
			for _, x := range v {
				walk(x, depth+1)
			}
		case map[string]any:
			for k, x := range v {
				ok = ok && !strings.ContainsRune(k, utf8.RuneError)
				walk(x, depth+1)
			}
		}
	}
	walk(v, 0)
	return v, ok && !nameTwice(raw)
}

// nameTwice reports whether an object of the JSON text s has a member name
// twice.
func nameTwice(s string) bool {
	d := json.NewDecoder(strings.NewReader(s))
	type frame struct {
		object  bool
		names   []string
		keyNext bool
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := top != nil && top.object && top.keyNext
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				if top != nil && top.object {
					top.keyNext = true
				}
				stack = append(stack, &frame{object: tok == '{', keyNext: true})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if isKey {
				if slices.Contains(top.names, tok) {
					return true
				}
				top.names = append(top.names, tok)
				top.keyNext = false
				continue
			}
		}
		if top != nil && top.object {
			top.keyNext = true
		}
	}
}

// equalValues is JSON Schema's equality of two decoded values: numbers by
// their exact value.
func equalValues(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		x, okx := new(big.Rat).SetString(string(a))
		y, oky := new(big.Rat).SetString(string(b))
		return okx && oky && x.Cmp(y) == 0
	case []any:
		b, ok := b.([]any)
		return ok && slices.EqualFunc(a, b, equalValues)
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, x := range a {
			y, ok := b[k]
			if !ok || !equalValues(x, y) {
				return false
			}
		}
		return true
	}
	return a == b
}
