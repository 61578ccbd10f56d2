package conformance

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestExecRequest: io.toolbus.exec on P.exec.<tool> carries sessionid,
// replyid, toolcallid and expirytime, and data {"call": {id, name, input},
// "user", "context", "attempt": 1, "progress_reply": true} with the validated
// input object and no "state" for a tool that is not state_injected
// (docs/protocol.md 5.1; progress_reply since 1.18).
func TestExecRequest(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("get_weather", M{"timeout_ms": 60000, "input_schema": weatherSchema}))
	before := time.Now()
	s.call(t, "s1", "r1", M{"calls": []Call{{ID: "toolu_01", Name: "get_weather", Input: `{"city": "Oslo"}`}},
		"user": "alice", "context": M{"tenant": "acme"}})
	got := w.received()
	if len(got) != 1 {
		t.Fatalf("%d exec requests", len(got))
	}
	c := got[0]
	e := c.ev
	if e.Type != tExec || e.Msg.Subject != "toolbus.exec.get_weather" || e.Msg.Reply == "" {
		t.Fatalf("exec %s on %s (reply %q)", e.Type, e.Msg.Subject, e.Msg.Reply)
	}
	decodeEvent(t, e.Msg) // envelope and header rules
	fromRouter(t, e)
	if e.SessionID != "s1" || e.ReplyID != "r1" || e.ToolCallID != "toolu_01" {
		t.Errorf("attributes sessionid %q replyid %q toolcallid %q", e.SessionID, e.ReplyID, e.ToolCallID)
	}
	exp, err := time.Parse(time.RFC3339Nano, e.ExpiryTime)
	if err != nil {
		t.Fatalf("expirytime %q: %v", e.ExpiryTime, err)
	}
	if d := exp.Sub(before); d < 50*time.Second || d > 70*time.Second {
		t.Errorf("expirytime %s is %v after the call, want about the tool's timeout of 60s", e.ExpiryTime, d)
	}
	wantKeys(t, "exec data", c.data, "call", "user", "context", "attempt", "progress_reply")
	if p := member(t, c.data, "progress_reply"); string(p) != "true" {
		t.Errorf("exec data progress_reply %s, want true: the router takes the call's progress (5.1, 5.3, 1.18)", p)
	}
	wantKeys(t, "exec call", member(t, c.data, "call"), "id", "name", "input")
	if c.Call.ID != "toolu_01" || c.Call.Name != "get_weather" || string(c.Call.Input) != `{"city":"Oslo"}` {
		t.Errorf("call %s: want the validated input object", member(t, c.data, "call"))
	}
	if c.Attempt != 1 || string(c.User) != `"alice"` || !jsonEqual(c.Context, M{"tenant": "acme"}) {
		t.Errorf("data %s", c.data)
	}
}

// TestExecExpiryFromBatch: a batch expirytime shortens the tool's timeout;
// the exec request's expirytime is that deadline.
func TestExecExpiryFromBatch(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("ping", M{"timeout_ms": 60000}))
	deadline := time.Now().Add(20 * time.Second).UTC()
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "ping"}), "expirytime", deadline.Format(time.RFC3339Nano))
	exp, err := time.Parse(time.RFC3339Nano, w.received()[0].ev.ExpiryTime)
	if err != nil {
		t.Fatal(err)
	}
	if d := exp.Sub(deadline); d < -time.Second || d > time.Second {
		t.Errorf("exec expirytime %v, want the batch's %v", exp, deadline)
	}
}

// TestStateInjected: state_injected tools get the session's agent state
// and may return a JSON merge patch (RFC 7386) that the router applies.
func TestStateInjected(t *testing.T) {
	s := start(t)
	var mu sync.Mutex
	var seen []string
	patches := []any{M{"count": 1, "nested": M{"a": 1, "b": 2}}, M{"nested": M{"a": nil}, "list": []int{1}}, nil}
	s.serve(t, func(c *execCall) {
		mu.Lock()
		n := len(seen)
		seen = append(seen, string(c.State))
		mu.Unlock()
		if c.Call.Name == "plain" {
			c.text("plain")
			return
		}
		if patches[n] == nil {
			c.text("read")
			return
		}
		c.result("success", []Block{{Type: "text", Text: "patched"}}, M{"state_patch": patches[n]})
	}, def("stateful", M{"state_injected": true, "concurrency_safe": false}), def("plain"))
	for i, id := range []string{"r1", "r2", "r3"} {
		r := s.call(t, "s1", id, callsData(Call{ID: "c1", Name: "stateful"}))
		if r.Results[0].State != "success" {
			t.Fatalf("call %d: %s", i, jsonOf(r.Results[0]))
		}
	}
	w := s.call(t, "s1", "r4", callsData(Call{ID: "c1", Name: "plain"}))
	wantSuccess(t, w.Results[0], "plain")
	mu.Lock()
	defer mu.Unlock()
	want := []any{M{}, M{"count": 1, "nested": M{"a": 1, "b": 2}}, M{"count": 1, "nested": M{"b": 2}, "list": []int{1}}}
	for i, st := range seen[:3] {
		if st == "" || !jsonEqual(json.RawMessage(st), want[i]) {
			t.Errorf("call %d saw state %s, want %s", i+1, st, jsonOf(want[i]))
		}
	}
	if seen[3] != "" {
		t.Errorf("a tool that is not state_injected got state %s", seen[3])
	}
}

// TestProgressIsNotPartOfTheResult: progress a worker publishes reaches the
// session's events; the final result is only what the tool returns.
func TestProgressIsNotPartOfTheResult(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		c.progress(1, "10%")
		c.progress(2, "90%")
		c.text("finished")
	}, def("long"))
	ev := s.watch(t, "s1")
	other := s.watch(t, "s2")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "long"}))
	wantSuccess(t, r.Results[0], "finished")
	es := ev.until(doneOf("r1"))
	var seqs []int
	for _, e := range es {
		if e.Type == tCallProg {
			var p struct {
				Seq    int     `json:"seq"`
				Output []Block `json:"output"`
			}
			dataAs(t, e, &p)
			seqs = append(seqs, p.Seq)
		}
	}
	if !slices.Equal(seqs, []int{1, 2}) {
		t.Errorf("progress seqs %v", seqs)
	}
	done := checkBatchEvents(t, es, "s1", "r1", "c1")
	wantSuccess(t, done[0], "finished")
	s.list(t, "s2", nil)
	if n := len(other.pending()); n != 0 {
		t.Errorf("%d events of s1 on s2's subject", n)
	}
}

// TestWorkerRefusesRequest: a worker that cannot decode a request answers
// io.toolbus.error bad_event; the call ends with an error result
// (docs/protocol.md 5: internal).
func TestWorkerRefusesRequest(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		c.respond(tError, M{"code": "bad_event", "message": "cannot decode"})
	}, def("picky"))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "picky"}))
	wantFailure(t, r.Results[0], "error", "internal", "")
}

// TestToolErrorState: a worker's state "error" is a tool_error result with
// the worker's output as the readable text.
func TestToolErrorState(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) { c.result("error", []Block{{Type: "text", Text: "quota exceeded"}}) }, def("quota"))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "quota"}))
	wantFailure(t, r.Results[0], "error", "tool_error", "quota exceeded")
}

// TestUnavailable: a registered tool without a live worker gives
// unavailable (docs/protocol.md 3.3).
func TestUnavailable(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("ghost"))
	w.leave(t)
	s.waitUnlisted(t, "probe", "ghost")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "ghost"}))
	wantFailure(t, r.Results[0], "error", "unavailable", "")
}

// trace records the start and end of calls in one order.
type trace struct {
	mu  sync.Mutex
	log []string
}

func (tr *trace) add(s string) {
	tr.mu.Lock()
	tr.log = append(tr.log, s)
	tr.mu.Unlock()
}

func (tr *trace) index(s string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Index(tr.log, s)
}

// TestBatchOrder: maximal runs of concurrency-safe calls (unknown tools
// count as safe) run in parallel; an unsafe call never overlaps another;
// runs go one after another; a failing call cancels nothing (docs/protocol.md 5.2).
func TestBatchOrder(t *testing.T) {
	s := start(t)
	var tr trace
	var mu sync.Mutex
	started := map[string]*gate{}
	startedGate := func(id string) *gate {
		mu.Lock()
		defer mu.Unlock()
		if started[id] == nil {
			started[id] = newGate()
		}
		return started[id]
	}
	// partner: each safe call of a pair waits until its partner started,
	// which only happens when they run in parallel.
	partner := map[string]string{"a1": "a2", "a2": "a1", "b1": "b2", "b2": "b1"}
	s.serve(t, func(c *execCall) {
		id := c.Call.ID
		tr.add("start " + id)
		startedGate(id).open()
		if p, ok := partner[id]; ok && !startedGate(p).wait(c.ctx) {
			return
		}
		tr.add("end " + id)
		if id == "a2" {
			c.result("error", []Block{{Type: "text", Text: "a2 failed"}})
			return
		}
		c.text(id + " ok")
	}, def("safe"), def("unsafe", M{"concurrency_safe": false}))
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(
		Call{ID: "a1", Name: "safe"}, Call{ID: "x", Name: "nope"}, Call{ID: "a2", Name: "safe"},
		Call{ID: "u1", Name: "unsafe"}, Call{ID: "u2", Name: "unsafe"},
		Call{ID: "b1", Name: "safe"}, Call{ID: "b2", Name: "safe"}))
	wantIDs(t, "reply", r.Results, "a1", "x", "a2", "u1", "u2", "b1", "b2")
	wantSuccess(t, r.Results[0], "a1 ok")
	wantFailure(t, r.Results[2], "error", "tool_error", "a2 failed")
	for _, res := range r.Results[3:] {
		wantSuccess(t, res, res.ID+" ok")
	}
	order := [][2]string{
		{"end a1", "start u1"}, {"end a2", "start u1"},
		{"end u1", "start u2"},
		{"end u2", "start b1"}, {"end u2", "start b2"},
	}
	for _, o := range order {
		if i, j := tr.index(o[0]), tr.index(o[1]); i < 0 || j < 0 || i > j {
			t.Errorf("%q must come before %q; log %v", o[0], o[1], tr.log)
		}
	}
	checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "a1", "x", "a2", "u1", "u2", "b1", "b2")
}

// TestTimeoutText: a call that outlives its tool's timeout_ms ends with
// timeout, "Tool execution timeout after <Go duration>" (docs/protocol.md 5.3).
func TestTimeoutText(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) { <-c.ctx.Done() }, def("stuck", M{"timeout_ms": 300}))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "stuck"}))
	wantFailure(t, r.Results[0], "error", "timeout", "Tool execution timeout after 300ms")
}

// TestTimeoutFromBatchExpiry: a batch expirytime shortens the timeout.
func TestTimeoutFromBatchExpiry(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) { <-c.ctx.Done() }, def("stuck", M{"timeout_ms": 60000}))
	exp := time.Now().Add(400 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	start := time.Now()
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "stuck"}), "expirytime", exp)
	wantFailure(t, r.Results[0], "error", "timeout", "")
	text := textOf(r.Results[0])
	d, err := time.ParseDuration(strings.TrimPrefix(text, "Tool execution timeout after "))
	if !strings.HasPrefix(text, "Tool execution timeout after ") || err != nil || d <= 0 || d > 400*time.Millisecond {
		t.Errorf("text %q: want a Go duration of at most 400ms", text)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("the call took %v: the batch expirytime did not shorten the timeout of 60s", el)
	}
}

// TestRetries: only read_only or idempotent tools with max_attempts > 1 are
// retried, on timeout; attempt counts from 1 (docs/protocol.md 5.1, 5.3).
func TestRetries(t *testing.T) {
	s := start(t)
	var mu sync.Mutex
	attempts := map[string][]int{}
	s.serve(t, func(c *execCall) {
		mu.Lock()
		attempts[c.Call.Name] = append(attempts[c.Call.Name], c.Attempt)
		mu.Unlock()
		if c.Attempt < 2 {
			<-c.ctx.Done() // the first attempt times out
			return
		}
		c.text("attempt 2 ok")
	}, def("reader", M{"read_only": true, "max_attempts": 3, "timeout_ms": 300}),
		def("idem", M{"idempotent": true, "max_attempts": 2, "timeout_ms": 300}),
		def("writer", M{"max_attempts": 3, "timeout_ms": 300}))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "reader"}, Call{ID: "c2", Name: "idem"}, Call{ID: "c3", Name: "writer"}))
	wantSuccess(t, r.Results[0], "attempt 2 ok")
	wantSuccess(t, r.Results[1], "attempt 2 ok")
	wantFailure(t, r.Results[2], "error", "timeout", "Tool execution timeout after 300ms")
	mu.Lock()
	defer mu.Unlock()
	for name, want := range map[string][]int{"reader": {1, 2}, "idem": {1, 2}, "writer": {1}} {
		if !slices.Equal(attempts[name], want) {
			t.Errorf("%s: attempts %v, want %v", name, attempts[name], want)
		}
	}
}

// TestInvalidOutputBlock: a result never carries a data block without
// exactly one of data and url (docs/protocol.md 3.3); a worker's malformed block
// turns the result into tool_error (docs/protocol.md 3.3, Decision).
func TestInvalidOutputBlock(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		switch c.Call.ID {
		case "both":
			c.result("success", []Block{{Type: "data", MediaType: "image/png", Data: "AA==", URL: "https://example.com/a.png"}})
		case "neither":
			c.result("success", []Block{{Type: "data", MediaType: "image/png"}})
		case "kind":
			c.result("success", []Block{{Type: "video", URL: "https://example.com/a.mp4"}})
		}
	}, def("wk"))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "both", Name: "wk"}, Call{ID: "neither", Name: "wk"}, Call{ID: "kind", Name: "wk"}))
	for _, res := range r.Results {
		wantFailure(t, res, "error", "tool_error", "")
	}
}
