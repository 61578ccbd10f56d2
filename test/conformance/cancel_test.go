package conformance

import (
	"testing"
)

// blocker is a handler that signals started and then waits for its
// context to end (a cancel) or the gate; cancelled records a cancel.
type blocker struct {
	started   chan string
	release   *gate
	cancelled chan string
}

func newBlocker() *blocker {
	return &blocker{started: make(chan string, 16), release: newGate(), cancelled: make(chan string, 16)}
}

func (b *blocker) handle(c *execCall) {
	if c.Call.Name != "block" {
		c.text(c.Call.Name + " ran")
		return
	}
	b.started <- c.Call.ID
	if b.release.wait(c.ctx) {
		c.text("block finished")
		return
	}
	b.cancelled <- c.Call.ID
	c.result("interrupted", []Block{{Type: "text", Text: "stopped"}})
}

// TestCancelRunningCalls: a cancel with only replyid ends every running
// call of the reply interrupted, with the fixed text; the worker sees its
// context cancelled; the reply and batch.done follow (docs/protocol.md 3.5).
func TestCancelRunningCalls(t *testing.T) {
	s := start(t)
	b := newBlocker()
	s.serve(t, b.handle, def("block"), def("quick"))
	ev := s.watch(t, "s1")
	data := callsData(Call{ID: "c1", Name: "block"}, Call{ID: "c2", Name: "quick"}, Call{ID: "c3", Name: "block"})
	data["events"] = "calls" // to see quick finish (docs/protocol.md 3.4)
	p := s.callAsync(t, "s1", "r1", data)
	waitChan(t, b.started, "first call started")
	waitChan(t, b.started, "second call started")
	first := ev.until(func(e *Event) bool { return e.Type == tCallResult && e.ToolCallID == "c2" }) // quick finished
	s.cancel(t, "s1", "r1", nil)
	r := p.reply(t, "s1", "r1")
	wantIDs(t, "reply", r.Results, "c1", "c2", "c3")
	wantFailure(t, r.Results[0], "interrupted", "interrupted", interruptedText)
	wantSuccess(t, r.Results[1], "quick ran")
	wantFailure(t, r.Results[2], "interrupted", "interrupted", interruptedText)
	done := checkBatchEvents(t, append(first, ev.until(doneOf("r1"))...), "s1", "r1", "c1", "c2", "c3")
	wantFailure(t, done[0], "interrupted", "interrupted", interruptedText)
	for range 2 {
		waitChan(t, b.cancelled, "the worker's context to be cancelled")
	}
}

// TestCancelNamedCalls: data {"calls": [ids]} cancels only those calls.
func TestCancelNamedCalls(t *testing.T) {
	s := start(t)
	b := newBlocker()
	s.serve(t, b.handle, def("block"))
	ev := s.watch(t, "s1")
	p := s.callAsync(t, "s1", "r1", callsData(Call{ID: "c1", Name: "block"}, Call{ID: "c2", Name: "block"}))
	waitChan(t, b.started, "call started")
	waitChan(t, b.started, "call started")
	s.cancel(t, "s1", "r1", []string{"c1"})
	if got := waitChan(t, b.cancelled, "c1 cancelled"); got != "c1" {
		t.Fatalf("worker cancelled %s, want c1", got)
	}
	es := ev.until(typeIs(tCallResult, "r1"))
	if es[len(es)-1].ToolCallID != "c1" {
		t.Fatalf("first result is for %s, want c1", es[len(es)-1].ToolCallID)
	}
	b.release.open()
	r := p.reply(t, "s1", "r1")
	wantFailure(t, r.Results[0], "interrupted", "interrupted", interruptedText)
	wantSuccess(t, r.Results[1], "block finished")
	checkBatchEvents(t, append(es, ev.until(doneOf("r1"))...), "s1", "r1", "c1", "c2")
}

// TestCancelOtherSessionOrUnknownReply: a cancel for an unknown reply id,
// or on another session's subject, is a no-op.
func TestCancelOtherSessionOrUnknownReply(t *testing.T) {
	s := start(t)
	b := newBlocker()
	s.serve(t, b.handle, def("block"))
	p := s.callAsync(t, "s1", "r1", callsData(Call{ID: "c1", Name: "block"}))
	waitChan(t, b.started, "call started")
	s.cancel(t, "s1", "unknown", nil)
	s.cancel(t, "s2", "r1", nil)
	// Behind both cancels, a round trip through the router.
	s.list(t, "s1", nil)
	b.release.open()
	r := p.reply(t, "s1", "r1")
	wantSuccess(t, r.Results[0], "block finished")
	if len(b.cancelled) != 0 {
		t.Fatal("a cancel for another reply or session cancelled the call")
	}
}
