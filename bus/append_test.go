package bus

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// AppendJSON gives the JSON json.Marshal gives: the same value once
// decoded (AppendJSON leaves U+2028, U+2029 and HTML characters as they
// are, which json.Marshal escapes).
func TestExecRequestAppendJSON(t *testing.T) {
	for _, r := range []ExecRequest{
		{},
		{Call: Call{ID: "c1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)}, Attempt: 1},
		{Call: Call{ID: "c\"2", Name: "n\\a<m>e\u2028\x01"}, User: json.RawMessage(`{"id":"u"}`),
			Context: json.RawMessage(`[1, 2]`), Attempt: 3, State: json.RawMessage(`{"k":true}`)},
		{Call: Call{ID: "\xff", Name: "é"}, Attempt: -1},
	} {
		got := r.AppendJSON(nil)
		sameAsMarshal(t, got, &r)
	}
}

// sameAsMarshal fails t unless got decodes to the value json.Marshal(v)
// decodes to.
func sameAsMarshal(t *testing.T, got []byte, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := decoded(t, got), decoded(t, want); !reflect.DeepEqual(g, w) {
		t.Fatalf("hand-written\n got %s\njson.Marshal\n     %s", got, want)
	}
}

// decoded is b decoded into any.
func decoded(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return v
}

func FuzzExecRequestAppendJSON(f *testing.F) {
	f.Add("c1", "tool", `{"a":1}`, 2)
	f.Add("", "\x00\"\\", ``, 0)
	f.Fuzz(func(t *testing.T, id, name, input string, attempt int) {
		r := ExecRequest{Call: Call{ID: id, Name: name}, Attempt: attempt}
		if json.Valid([]byte(input)) {
			r.Call.Input = json.RawMessage(input)
		}
		got := r.AppendJSON(nil)
		sameAsMarshal(t, got, &r)
	})
}

func TestResultAppendJSON(t *testing.T) {
	prio := 0.25
	results := []Result{
		{},
		{ID: "c1", Name: "t", State: StateSuccess, Output: Text("hi\n\"there\"")},
		{ID: "c2", Name: "t", State: StateSuccess, Output: []Block{}, Metadata: json.RawMessage(`{"toolbus_cache":{"hit":true}}`)},
		ErrorResult(Call{ID: "c3", Name: "t"}, CodeInvalidInput, "bad <input>", Detail{Path: "/a", Message: "m"}, Detail{Path: "", Message: "\x00"}),
		{ID: "c4", Name: "t", State: StateError, Output: Text("slow"), Error: &ResultError{Code: CodeLimitExceeded, Message: "wait", RetryAfterMS: 1500}},
		{ID: "c5", Name: "t", State: StateSuccess, Output: []Block{{Type: BlockData, MediaType: "image/png", URL: "nats-object://o/k", Size: 12,
			URI: "u", Name: "n", Title: "ti", Description: "d", Annotations: &Annotations{Audience: []string{AudienceUser}, Priority: &prio}}}},
		{ID: "c6", Name: "t", State: StateBackground, Output: Text("on"), Task: &TaskHandle{ID: "k1", State: StateBackground, Subject: "toolbus.tasks.s"}},
	}
	for _, r := range results {
		got, err := r.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		sameAsMarshal(t, got, &r)
		x := ExecResult{State: r.State, Output: r.Output, Metadata: r.Metadata, StatePatch: r.Metadata, Cancel: r.ID}
		got, err = x.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		sameAsMarshal(t, got, &x)
	}
}

func FuzzResultAppendJSON(f *testing.F) {
	f.Add("c1", "success", "text", "hi", "", int64(0), "", "", `{"a":1}`)
	f.Add("", "", "data", "", "aGk=", int64(3), "invalid_input", "\xff", ``)
	f.Fuzz(func(t *testing.T, id, state, typ, text, data string, size int64, code, msg, meta string) {
		r := Result{ID: id, Name: id, State: state, Output: []Block{{Type: typ, Text: text, Data: data, Size: size}}}
		if code != "" {
			r.Error = &ResultError{Code: code, Message: msg, Details: []Detail{{Path: msg, Message: code}}, RetryAfterMS: size}
		}
		if json.Valid([]byte(meta)) {
			r.Metadata = json.RawMessage(meta)
		}
		got, err := r.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		sameAsMarshal(t, got, &r)
	})
}

// A progress event's data (the worker's Call.Progress) as json.Marshal
// gives it: null output when there is none, every kind of block.
func TestProgressAppendJSON(t *testing.T) {
	prio := 0.5
	for _, p := range []Progress{
		{},
		{Seq: 1, Output: []Block{}},
		{Seq: 2, Output: Text("50% done\n\"quoted\" <b>\u2028")},
		{Seq: -3, Output: []Block{{Type: BlockText, Text: "a"}, {Type: BlockData, MediaType: "image/png", Data: "aGk=", Size: 2},
			{Type: "resource_link", URI: "file:///x", Name: "x", Title: "X", Description: "d",
				Annotations: &Annotations{Audience: []string{"user"}, Priority: &prio, LastModified: "2026-12-05T02:00:00Z"}}}},
	} {
		got, err := p.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		sameAsMarshal(t, got, &p)
	}
}

// A raw member that is not JSON is refused, as json.Marshal refuses it.
func TestAppendJSONInvalidRaw(t *testing.T) {
	// The plain form with more after it (validJSON's fast read stops short) too.
	for _, bad := range []json.RawMessage{json.RawMessage(`{"a":`), json.RawMessage(`{"a":1}x`), json.RawMessage(`{} {}`), json.RawMessage(`[1,]`)} {
		if _, err := (&Result{Metadata: bad}).AppendJSON(nil); err == nil {
			t.Errorf("Result with invalid metadata %s encoded", bad)
		}
		for _, x := range []ExecResult{{Metadata: bad}, {StatePatch: bad}} {
			if _, err := x.AppendJSON(nil); err == nil || json.Valid(bad) {
				t.Errorf("%+v encoded", x)
			}
		}
		if _, err := (&Batch{Calls: []Call{{ID: "c1", Name: "t", Input: bad}}}).AppendJSON(nil); err == nil {
			t.Errorf("batch with input %s encoded", bad)
		}
	}
}

func TestBatchAppendJSON(t *testing.T) {
	for _, b := range []Batch{
		{},
		{Calls: []Call{}},
		{Calls: []Call{{ID: "c1", Name: "slow", Background: true}}},
		{Calls: []Call{{ID: "c1", Name: "get_weather", Input: json.RawMessage(`{"city": "Oslo"}`)}, {ID: "c2", Name: "n\"x"}},
			User: json.RawMessage(`"alice"`), Context: json.RawMessage(`{"tenant":"acme"}`), Events: EventsCalls, SessionRev: 42},
		{Calls: []Call{{ID: "c1", Name: "pick"}}, Request: &Request{MergeMode: MergeExternalOnly,
			ExternalTools: []ExternalTool{{Name: "pick", Description: "Pick.", InputSchema: json.RawMessage(`{"type":"object"}`)}}}},
	} {
		got, err := b.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		sameAsMarshal(t, got, &b)
	}
	for _, b := range []Batch{
		{Calls: []Call{{ID: "c1", Name: "t", Input: json.RawMessage(`{`)}}},
		{User: json.RawMessage(`nope`)},
		{Context: json.RawMessage(`[1,`)},
	} {
		if _, err := b.AppendJSON(nil); err == nil {
			t.Errorf("%+v encoded", b)
		}
	}
}

func FuzzBatchAppendJSON(f *testing.F) {
	f.Add("c1", "tool", `{"a":1}`, `"u"`, "calls", uint64(3))
	f.Fuzz(func(t *testing.T, id, name, input, user, events string, rev uint64) {
		b := Batch{Calls: []Call{{ID: id, Name: name, Input: json.RawMessage(input)}}, User: json.RawMessage(user), Events: events, SessionRev: rev}
		got, err := b.AppendJSON(nil)
		if _, werr := json.Marshal(&b); (err == nil) != (werr == nil) {
			t.Fatalf("AppendJSON error %v, json.Marshal error %v", err, werr)
		}
		if err == nil {
			sameAsMarshal(t, got, &b)
		}
	})
}

// Raw members are written compacted, as json.Marshal writes a
// json.RawMessage: a worker sees an agent's user and context byte for byte
// as before the encoders were written by hand.
func TestAppendJSONCompactsRaw(t *testing.T) {
	spaced := json.RawMessage(`{"id": "u 1", "roles": ["admin", "ops"],
	"n": 2.50}`)
	const compact = `{"id":"u 1","roles":["admin","ops"],"n":2.50}`
	req := ExecRequest{Call: Call{ID: "c1", Name: "t", Input: spaced}, User: spaced, Context: spaced, Attempt: 1, State: spaced}
	res := Result{ID: "c1", Name: "t", State: StateSuccess, Output: Text("x"), Metadata: spaced}
	xres := ExecResult{State: StateSuccess, Metadata: spaced, StatePatch: spaced}
	batch := Batch{Calls: []Call{{ID: "c1", Name: "t", Input: spaced}}, User: spaced, Context: spaced}
	r1, _ := res.AppendJSON(nil)
	r2, _ := xres.AppendJSON(nil)
	r3, _ := batch.AppendJSON(nil)
	for _, got := range [][]byte{req.AppendJSON(nil), r1, r2, r3} {
		if n := strings.Count(string(got), compact); n == 0 || strings.Contains(string(got), "\n") || strings.Contains(string(got), `"id": `) {
			t.Errorf("%s: raw members not compacted", got)
		}
		want, _ := json.Marshal(json.RawMessage(got))
		if string(want) != string(got) {
			t.Errorf("got %s, json.Marshal would write %s", got, want)
		}
	}
}

// TestBatchAppendNoAllocation: a batch appended to a buffer large enough
// takes no allocation; an input that is not JSON is refused by its name.
func TestBatchAppendNoAllocation(t *testing.T) {
	b := Batch{Calls: []Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}, {ID: "c2", Name: "echo", Input: json.RawMessage(`{}`)}}, SessionRev: 3}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { _, _ = b.AppendJSON(buf[:0]) }); n != 0 && !raceEnabled {
		t.Errorf("%v allocations", n)
	}
	b.Calls[1].Input = json.RawMessage(`{`)
	if _, err := b.AppendJSON(nil); err == nil || err.Error() != "bus: calls[1].input is not valid JSON" {
		t.Errorf("error %v", err)
	}
}
