package bus

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

func TestSameCalls(t *testing.T) {
	c := func(id, name, input string) Call { return Call{ID: id, Name: name, Input: json.RawMessage(input)} }
	first := []Call{c("c1", "a", `{"x":1,"y":"<b>"}`), c("c2", "b", "")}
	for _, tc := range []struct {
		name string
		copy []Call
		want string // "" for the same calls
	}{
		{"same", []Call{c("c1", "a", `{"x":1,"y":"<b>"}`), c("c2", "b", "")}, ""},
		{"same, encoded again", []Call{c("c1", "a", `{ "y": "\u003cb\u003e", "x": 1 }`), c("c2", "b", `{}`)}, ""},
		{"same, string input", []Call{c("c1", "a", `"{\"y\":\"<b>\",\"x\":1}"`), c("c2", "b", `"{}"`)}, ""},
		{"number written otherwise (1.13)", []Call{c("c1", "a", `{"x":1.0,"y":"<b>"}`), c("c2", "b", "")}, ""},
		{"another number", []Call{c("c1", "a", `{"x":1.01,"y":"<b>"}`), c("c2", "b", "")}, "call c1 (a) has another input"},
		{"another input", []Call{c("c1", "a", `{"x":2,"y":"<b>"}`), c("c2", "b", "")}, "call c1 (a) has another input"},
		{"another tool", []Call{c("c1", "z", `{"x":1,"y":"<b>"}`), c("c2", "b", "")}, "call c1 names tool z here and a in that batch"},
		{"a call more", []Call{first[0], first[1], c("c3", "b", "")}, "call c3 (b) is not in that batch"},
		{"a call missing", []Call{first[0]}, "call c2 (b), call 2 of that batch, is missing here"},
		{"another order", []Call{first[1], first[0]}, "call c2 is call 1 here and call 2 in that batch"},
	} {
		err := SameCalls("r1", first, tc.copy)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "reply id r1 was sent before with other calls")):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestCallDigest(t *testing.T) {
	d := callDigest("write", json.RawMessage(`{"v": 1}`))
	if len(d) != 22 || d != callDigest("write", json.RawMessage(`{"v":1}`)) {
		t.Fatalf("digest %q, or whitespace counted", d)
	}
	for _, other := range []string{callDigest("write", json.RawMessage(`{"v":2}`)), callDigest("writ", json.RawMessage(`e{"v":1}`))} {
		if other == d {
			t.Fatalf("another call has the same digest %q", d)
		}
	}
	if raceEnabled {
		return // sync.Pool drops what it is given at random under -race
	}
	for _, in := range []json.RawMessage{json.RawMessage(`{"v":1}`), json.RawMessage(`{"w":[2.0,{"y":1,"x":"\u00e9"}],"v":1}`)} {
		if n := testing.AllocsPerRun(100, func() { callDigest("write", in) }); n > 1 {
			t.Fatalf("callDigest of %s allocates %v times, want at most 1 (its string)", in, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { compactDigest("write", json.RawMessage(`{"v":1}`)) }); n > 1 {
		t.Fatalf("compactDigest allocates %v times, want at most 1 (its string)", n)
	}
	in := json.RawMessage(`{"w":[2.0,{"y":1}],"v":1}`)
	if n := testing.AllocsPerRun(100, func() { CallDigests("write", in) }); n > 1 {
		t.Fatalf("CallDigests allocates %v times, want at most 1 (the two digests' string)", n)
	}
}

// callDigest and compactDigest are CallDigests' canon and compact digests
// as the ledger's claim holds them, each made alone.
func callDigest(name string, in json.RawMessage) string    { return digestText(canonSum(name, in)) }
func compactDigest(name string, in json.RawMessage) string { return digestText(compactSum(name, in)) }
func digestText(sum [32]byte) string                       { return base64.RawURLEncoding.EncodeToString(sum[:16]) }

// CallDigests gives what compactDigest and callDigest give.
func TestCallDigests(t *testing.T) {
	for _, in := range []string{``, `{}`, `{"v": 1}`, `{"w":[2.0,{"y":1,"x":"\u00e9"}],"v":1}`, `"{\"b\":1,\"a\":2}"`, `not json`} {
		compact, canon := CallDigests("write", json.RawMessage(in))
		if compact != compactDigest("write", json.RawMessage(in)) || canon != callDigest("write", json.RawMessage(in)) {
			t.Errorf("%s: CallDigests %q, %q; want %q, %q", in, compact, canon, compactDigest("write", json.RawMessage(in)), callDigest("write", json.RawMessage(in)))
		}
	}
}
