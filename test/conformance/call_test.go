package conformance

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestReplyAndEventOrder: the reply lists results in call order; events
// carry one call.result per call in completion order, then batch.done with
// every result in call order (docs/protocol.md 3.2, 3.4).
func TestReplyAndEventOrder(t *testing.T) {
	s := start(t)
	release := newGate()
	s.serve(t, func(c *execCall) {
		if c.Call.Name == "slow" && !release.wait(c.ctx) {
			return
		}
		c.text(c.Call.Name + " ran")
	}, def("slow"), def("fast"))

	ev := s.watch(t, "s1")
	// "events": "calls" (docs/protocol.md 3.4): a call.result per call, in
	// completion order, beside batch.done.
	data := callsData(Call{ID: "c1", Name: "slow"}, Call{ID: "c2", Name: "fast"}, Call{ID: "c3", Name: "nope"})
	data["events"] = "calls"
	p := s.callAsync(t, "s1", "turn1", data)
	// The fast and the unknown call finish first; only then does slow.
	first := ev.until(func(e *Event) bool { return e.Type == tCallResult && e.ToolCallID == "c2" })
	release.open()
	es := append(first, ev.until(doneOf("turn1"))...)

	var order []string
	for _, e := range es {
		if e.Type == tCallResult {
			order = append(order, e.ToolCallID)
		}
	}
	if strings.Join(order, ",") != "c3,c2,c1" && strings.Join(order, ",") != "c2,c3,c1" {
		t.Errorf("call.result order %v: want completion order, slow c1 last", order)
	}
	done := checkBatchEvents(t, es, "s1", "turn1", "c1", "c2", "c3")
	checkCallResults(t, es, "turn1", "c1", "c2", "c3")
	wantSuccess(t, done[0], "slow ran")
	wantSuccess(t, done[1], "fast ran")
	wantFailure(t, done[2], "error", "unknown_tool", "ToolNotFoundError: The tool named 'nope' doesn't exist.")

	r := p.reply(t, "s1", "turn1")
	wantIDs(t, "reply", r.Results, "c1", "c2", "c3")
	if jsonOf(r.Results) != jsonOf(done) {
		t.Errorf("reply results %s differ from batch.done %s", jsonOf(r.Results), jsonOf(done))
	}
	if len(r.Parked) != 0 {
		t.Errorf("parked %v, want none", r.Parked)
	}
}

// TestResultShape: a result has exactly id, name, state, output and, for
// errors, error {code, message}; the error text is both the readable block
// and error.message (docs/protocol.md 3.3).
func TestResultShape(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		switch c.Call.Name {
		case "img":
			c.result("success", []Block{{Type: "text", Text: "here"}, {Type: "data", MediaType: "image/png", Data: "iVBORw0KGgo="},
				{Type: "data", MediaType: "application/pdf", URL: "https://example.com/a.pdf"}}, M{"metadata": M{"pages": 1}})
		case "fails":
			c.result("error", []Block{{Type: "text", Text: "disk full"}})
		}
	}, def("img"), def("fails"))
	e := s.callRaw(t, "s1", "r1", callsData(Call{ID: "c1", Name: "img"}, Call{ID: "c2", Name: "fails"}, Call{ID: "c3", Name: "nope"}))
	var raw struct {
		Results []json.RawMessage `json:"results"`
	}
	dataAs(t, e, &raw)
	if len(raw.Results) != 3 {
		t.Fatalf("results %s", e.Data)
	}
	hasKeys(t, "success result", raw.Results[0], "id", "name", "state", "output")
	hasKeys(t, "error result", raw.Results[1], "id", "name", "state", "output", "error")
	r := s.wantReply(t, e, "s1", "r1")
	img := r.Results[0]
	if img.State != "success" || img.Error != nil || len(img.Output) != 3 {
		t.Fatalf("img: %s", jsonOf(img))
	}
	if img.Output[1] != (Block{Type: "data", MediaType: "image/png", Data: "iVBORw0KGgo="}) ||
		img.Output[2] != (Block{Type: "data", MediaType: "application/pdf", URL: "https://example.com/a.pdf"}) {
		t.Errorf("data blocks changed on the way: %s", jsonOf(img.Output))
	}
	if string(img.Metadata) != `{"pages":1}` {
		t.Errorf("metadata %s, want the worker's {\"pages\":1}", img.Metadata)
	}
	wantFailure(t, r.Results[1], "error", "tool_error", "disk full")
	for _, res := range r.Results[1:] {
		if res.Error.Message != textOf(res) {
			t.Errorf("%s: error.message %q, text %q", res.ID, res.Error.Message, textOf(res))
		}
	}
}

// TestUnknownToolText: docs/protocol.md 3.3's fixed text, also for names that
// are not valid tool names.
func TestUnknownToolText(t *testing.T) {
	s := start(t)
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "get_weather"}, Call{ID: "c2", Name: "bad name!"}))
	wantFailure(t, r.Results[0], "error", "unknown_tool", "ToolNotFoundError: The tool named 'get_weather' doesn't exist.")
	if r.Results[0].Error.Message != textOf(r.Results[0]) {
		t.Errorf("error.message %q", r.Results[0].Error.Message)
	}
	wantFailure(t, r.Results[1], "error", "unknown_tool", "ToolNotFoundError: The tool named 'bad name!' doesn't exist.")
}

// TestInputForms: input is a JSON object or a string holding one (as
// OpenAI returns arguments); anything else is an invalid_input result for
// that call and the tool does not run (docs/protocol.md 3.1).
func TestInputForms(t *testing.T) {
	s := start(t)
	w := s.serve(t, func(c *execCall) { c.text(string(c.Call.Input)) },
		def("lenient", M{"input_schema": M{"type": "object", "properties": M{"city": M{"type": "string"}}}}))
	cases := []struct {
		name  string
		input json.RawMessage
		ok    bool
	}{
		{"object", json.RawMessage(`{"city": "Oslo"}`), true},
		{"string holding an object", json.RawMessage(`"{\"city\": \"Oslo\"}"`), true},
		{"array", json.RawMessage(`[{"city": "Oslo"}]`), false},
		{"number", json.RawMessage(`42`), false},
		{"boolean", json.RawMessage(`true`), false},
		{"null", json.RawMessage(`null`), false},
		{"empty string", json.RawMessage(`""`), false},
		{"string holding an array", json.RawMessage(`"[1]"`), false},
		{"string holding a string", json.RawMessage(`"\"Oslo\""`), false},
		{"string holding invalid JSON", json.RawMessage(`"{city: Oslo"`), false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := w.execs.Load()
			r := s.call(t, "s1", fmt.Sprintf("r%d", i), callsData(Call{ID: "c1", Name: "lenient", Input: tc.input}))
			if tc.ok {
				wantSuccess(t, r.Results[0], `{"city":"Oslo"}`)
				return
			}
			wantFailure(t, r.Results[0], "error", "invalid_input", "")
			if !strings.HasPrefix(textOf(r.Results[0]), "Input validation failed for tool 'lenient':") {
				t.Errorf("text %q", textOf(r.Results[0]))
			}
			if n := w.execs.Load() - before; n != 0 {
				t.Errorf("the tool ran %d times on invalid input", n)
			}
		})
	}
}

// TestInvalidInputText: "Input validation failed for tool '<name>':" then
// one "<path>: <message>" line per problem, also in error.details.
func TestInvalidInputText(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("get_weather", M{"input_schema": M{"type": "object",
		"properties": M{"city": M{"type": "string"}, "days": M{"type": "integer"}}, "required": []string{"city"}}}))
	r := s.call(t, "s1", "r1", callsData(
		Call{ID: "c1", Name: "get_weather", Input: M{"city": 5, "days": "two"}},
		Call{ID: "c2", Name: "get_weather", Input: M{}}))
	for _, res := range r.Results {
		wantFailure(t, res, "error", "invalid_input", "")
		text := textOf(res)
		lines := strings.Split(text, "\n")
		if lines[0] != "Input validation failed for tool 'get_weather':" {
			t.Errorf("%s: first line %q", res.ID, lines[0])
		}
		if len(res.Error.Details) == 0 || len(lines)-1 != len(res.Error.Details) {
			t.Fatalf("%s: %d problem lines, %d details: %s", res.ID, len(lines)-1, len(res.Error.Details), jsonOf(res))
		}
		for i, d := range res.Error.Details {
			if want := d.Path + ": " + d.Message; lines[i+1] != want {
				t.Errorf("%s: line %d %q, detail %q", res.ID, i+1, lines[i+1], want)
			}
			if d.Message == "" || d.Path == "" {
				t.Errorf("%s: detail %v", res.ID, d)
			}
		}
		if res.Error.Message != text {
			t.Errorf("%s: error.message %q differs from the text %q", res.ID, res.Error.Message, text)
		}
	}
	paths := map[string]bool{}
	for _, d := range r.Results[0].Error.Details {
		paths[d.Path] = true
	}
	if !paths["/city"] || !paths["/days"] {
		t.Errorf("details %v: want one for /city and one for /days", r.Results[0].Error.Details)
	}
	if w.execs.Load() != 0 {
		t.Fatal("the tool ran on invalid input")
	}
}

// TestRuntimeContextForwarded: user and context reach every tool call of
// the batch unchanged (docs/protocol.md 3.1, 5.1).
func TestRuntimeContextForwarded(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("a"), def("b"))
	user := M{"id": "alice", "roles": []string{"admin"}}
	ctx := M{"tenant": "acme", "n": 1.5, "nested": M{"x": nil}}
	s.call(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "a"}, {ID: "c2", Name: "b"}, {ID: "c3", Name: "a"}},
		"user": user, "context": ctx})
	got := w.received()
	if len(got) != 3 {
		t.Fatalf("%d exec calls, want 3", len(got))
	}
	for _, c := range got {
		if !jsonEqual(c.User, user) || !jsonEqual(c.Context, ctx) {
			t.Errorf("call %s: user %s context %s, want %s %s", c.Call.ID, c.User, c.Context, jsonOf(user), jsonOf(ctx))
		}
	}
}

// jsonEqual compares raw JSON with a Go value semantically.
func jsonEqual(raw json.RawMessage, v any) bool {
	var a, b any
	if json.Unmarshal(raw, &a) != nil {
		return false
	}
	bb, _ := json.Marshal(v)
	_ = json.Unmarshal(bb, &b)
	return jsonOf(a) == jsonOf(b)
}

// TestDedupeResentBatch: re-sending a batch with the same session and id
// never runs a tool that is not read_only twice, and gets the same results
// (docs/protocol.md 3.1); another session with the same reply id is another batch.
func TestDedupeResentBatch(t *testing.T) {
	s := start(t)
	var mu sync.Mutex
	runs := map[string]int{}
	release := newGate()
	started := newGate()
	s.serve(t, func(c *execCall) {
		mu.Lock()
		runs[c.ev.SessionID+"/"+c.Call.ID]++
		n := runs[c.ev.SessionID+"/"+c.Call.ID]
		mu.Unlock()
		started.open()
		if !release.wait(c.ctx) {
			return
		}
		c.text(fmt.Sprintf("deployed #%d", n))
	}, def("deploy"))
	data := callsData(Call{ID: "c1", Name: "deploy", Input: M{"env": "prod"}})

	first := s.callAsync(t, "s1", "turn1", data)
	started.waitT(t, "the first run")
	second := s.callAsync(t, "s1", "turn1", data) // while the first still runs
	release.open()
	r1 := first.reply(t, "s1", "turn1")
	r2 := second.reply(t, "s1", "turn1")
	r3 := s.call(t, "s1", "turn1", data) // after it finished
	wantSuccess(t, r1.Results[0], "deployed #1")
	for _, r := range []Reply{r2, r3} {
		if jsonOf(r.Results) != jsonOf(r1.Results) {
			t.Errorf("re-sent batch got %s, want the first results %s", jsonOf(r.Results), jsonOf(r1.Results))
		}
	}
	other := s.call(t, "s2", "turn1", data)
	wantSuccess(t, other.Results[0], "deployed #1")
	mu.Lock()
	defer mu.Unlock()
	if runs["s1/c1"] != 1 || runs["s2/c1"] != 1 {
		t.Fatalf("runs %v: want one per session", runs)
	}
}

// TestPublishedBatch: a batch sent by plain publish (no reply subject) runs
// and reports through its events (docs/protocol.md 2).
func TestPublishedBatch(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("ping"))
	ev := s.watch(t, "s1")
	s.send(t, batch("s1", "pub1", callsData(Call{ID: "c1", Name: "ping"}, Call{ID: "c2", Name: "nope"})).msg(t, s.subj("call", "s1")))
	done := checkBatchEvents(t, ev.until(doneOf("pub1")), "s1", "pub1", "c1", "c2")
	wantSuccess(t, done[0], "ping ran")
}

// TestTraceContextPropagates: traceparent/tracestate of the batch reach the
// reply, the events and the exec request, as attributes and NATS headers
// (docs/protocol.md 1, 3.1, 5.1).
func TestTraceContextPropagates(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("ping"))
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ev := s.watch(t, "s1")
	e := s.callRaw(t, "s1", "r1", callsData(Call{ID: "c1", Name: "ping"}), "traceparent", tp, "tracestate", "vendor=x")
	s.wantReply(t, e, "s1", "r1")
	for _, x := range append([]*Event{e}, ev.until(doneOf("r1"))...) {
		if !strings.Contains(x.TraceParent, traceID) {
			t.Errorf("%s: traceparent %q, want trace id %s", x.Type, x.TraceParent, traceID)
		}
	}
	got := w.received()
	if len(got) != 1 {
		t.Fatalf("%d exec calls", len(got))
	}
	x := got[0].ev
	if !strings.Contains(x.TraceParent, traceID) || !strings.Contains(x.Msg.Header.Get("traceparent"), traceID) {
		t.Errorf("exec: traceparent attribute %q header %q, want trace id %s", x.TraceParent, x.Msg.Header.Get("traceparent"), traceID)
	}
}
