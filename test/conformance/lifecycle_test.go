package conformance

import (
	"encoding/json"
	"testing"
	"time"
)

// lifecycleFixture: handoff (external, allow), askme (permission ask,
// concurrency-safe), ping (safe) and serial (unsafe).
func lifecycleFixture(t *testing.T, opts ...option) (*sys, *worker) {
	s := start(t, opts...)
	w := s.startWorker(t, []M{def("handoff", M{"external": true}), def("askme", M{"permission": "ask"}),
		def("ping"), def("serial", M{"concurrency_safe": false})}, nil, echo)
	s.waitListed(t, "probe", "handoff", "askme", "ping", "serial")
	return s, w
}

// TestParkedConfirmExpires: a confirmation nobody answers expires with the
// timeout result (router option ParkTTL); the queued call behind it is
// resolved so that batch.done follows; a later answer is not_parked, the
// request is no longer handed out and leaves parked.list.
func TestParkedConfirmExpires(t *testing.T) {
	s, _ := lifecycleFixture(t, withParkTTL(300*time.Millisecond))
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "askme"}, Call{ID: "c2", Name: "serial"}))
	if len(r.Parked) != 2 || r.Parked[0].Kind != "confirm" || r.Parked[1].Kind != "queued" {
		t.Fatalf("reply %s", jsonOf(r))
	}
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1", "c2")
	wantFailure(t, done[0], "error", "timeout", "Tool execution timeout after 300ms")
	if done[1].State == "" {
		t.Errorf("queued call: %s", jsonOf(done[1]))
	}
	wantError(t, s.answer(t, "askme", "s1", "r1", "c1", M{"confirmed": true}), "not_parked", "")
	if n := len(s.parkedList(t, "s1")); n != 0 {
		t.Errorf("parked.list holds %d expired calls", n)
	}
	waitFor(t, func() error {
		if n := len(s.handoff(t, "toolbus.>")); n != 0 {
			return errorf("the handoff still hands out %d expired requests", n)
		}
		return nil
	})
}

// TestCancelNamedParkedCall: a cancel naming one parked call ends only
// that call interrupted (its call.result comes at once); the other stays
// parked and answerable, and batch.done follows its answer.
func TestCancelNamedParkedCall(t *testing.T) {
	s, _ := lifecycleFixture(t)
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "askme"}))
	if len(r.Parked) != 2 {
		t.Fatalf("reply %s", jsonOf(r))
	}
	s.cancel(t, "s1", "r1", []string{"c1"})
	es := ev.until(typeIs(tCallResult, "r1"))
	var res Result
	dataAs(t, es[len(es)-1], &res)
	if res.ID != "c1" {
		t.Fatalf("first result for %s", res.ID)
	}
	wantFailure(t, res, "interrupted", "interrupted", interruptedText)
	wantError(t, s.answer(t, "handoff", "s1", "r1", "c1", textAnswer("success", "late")), "not_parked", "")
	if ps := s.parkedList(t, "s1"); len(ps) != 1 {
		t.Fatalf("parked.list after cancelling c1: %d entries, want 1", len(ps))
	}
	s.answerOK(t, "askme", "s1", "r1", "c2", M{"confirmed": true})
	done := checkBatchEvents(t, dedupeResults(append(es, ev.until(doneOf("r1"))...)), "s1", "r1", "c1", "c2")
	wantFailure(t, done[0], "interrupted", "interrupted", interruptedText)
	wantSuccess(t, done[1], "askme ran")
}

// TestCancelQueuedCalls: cancelling the whole reply while a call is parked
// and others are queued behind it ends all of them interrupted and none of
// the queued calls ever runs.
func TestCancelQueuedCalls(t *testing.T) {
	s, w := lifecycleFixture(t)
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "askme"}, Call{ID: "c2", Name: "serial"}, Call{ID: "c3", Name: "ping"}))
	if len(r.Parked) != 3 || r.Parked[1].Kind != "queued" || r.Parked[2].Kind != "queued" {
		t.Fatalf("reply %s", jsonOf(r))
	}
	s.cancel(t, "s1", "r1", nil)
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1", "c2", "c3")
	for _, res := range done {
		wantFailure(t, res, "interrupted", "interrupted", interruptedText)
	}
	if n := w.execs.Load(); n != 0 {
		t.Errorf("%d calls ran after the cancel", n)
	}
	wantError(t, s.answer(t, "askme", "s1", "r1", "c1", M{"confirmed": true}), "not_parked", "")
}

// TestPartialAnswersMixed: external and confirm calls of one run are
// answered one by one, out of order: each answer brings its call.result
// (a confirmed call after it ran), batch.done only after the last.
func TestPartialAnswersMixed(t *testing.T) {
	s, _ := lifecycleFixture(t)
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "askme"}, Call{ID: "c3", Name: "handoff"}))
	if len(r.Parked) != 3 || len(r.Results) != 0 {
		t.Fatalf("reply %s", jsonOf(r))
	}
	var es []*Event
	for _, step := range []struct {
		tool, id string
		data     M
	}{
		{"handoff", "c3", textAnswer("success", "third")},
		{"askme", "c2", M{"confirmed": true}},
	} {
		s.answerOK(t, step.tool, "s1", "r1", step.id, step.data)
		got := ev.until(typeIs(tCallResult, "r1"))
		if last := got[len(got)-1]; last.ToolCallID != step.id {
			t.Fatalf("after answering %s: call.result for %s", step.id, last.ToolCallID)
		}
		es = append(es, got...)
	}
	s.list(t, "s1", nil) // one more round trip through the router
	for _, e := range ev.pending() {
		if e.Type == tBatchDone {
			t.Fatal("batch.done before the last answer")
		}
		es = append(es, e)
	}
	s.answerOK(t, "handoff", "s1", "r1", "c1", textAnswer("error", "first failed"))
	done := checkBatchEvents(t, dedupeResults(append(es, ev.until(doneOf("r1"))...)), "s1", "r1", "c1", "c2", "c3")
	wantFailure(t, done[0], "error", "tool_error", "first failed")
	wantSuccess(t, done[1], "askme ran")
	wantSuccess(t, done[2], "third")
}

// TestLateHandlerFollows: with no handler online, external and confirm
// requests wait as parked records; a handler that comes online later
// follows the handoff through a router (P.handoff.<kind>), answers each
// from the event's attributes alone, and every batch completes. Answered
// requests are no longer handed out (docs/protocol.md 6.2).
func TestLateHandlerFollows(t *testing.T) {
	s, _ := lifecycleFixture(t)
	evA, evB := s.watch(t, "a"), s.watch(t, "b")
	s.call(t, "a", "r1", callsData(Call{ID: "c1", Name: "handoff", Input: M{"n": 1}}, Call{ID: "c2", Name: "askme"}))
	s.call(t, "b", "r1", callsData(Call{ID: "c1", Name: "handoff"}))

	seen := map[string]string{}
	for _, e := range s.handoff(t, "toolbus.>") {
		fromRouter(t, e)
		var d struct {
			Call    rawCall `json:"call"`
			Subject string  `json:"subject"`
		}
		dataAs(t, e, &d)
		tool := d.Call.Name
		if d.Call.ID != e.ToolCallID || d.Subject != "toolbus.answer."+tool || e.Subject != e.ToolCallID {
			t.Errorf("request: call %s, toolcallid %s, subject %s, answer subject %s", jsonOf(d.Call), e.ToolCallID, e.Subject, d.Subject)
		}
		var answer M
		switch e.Type {
		case tExternalReq:
			answer = textAnswer("success", "late answer for "+e.SessionID+"/"+e.ToolCallID)
		case tConfirmReq:
			answer = M{"confirmed": true}
		default:
			t.Fatalf("unexpected %s", e.Type)
		}
		seen[e.SessionID+"/"+e.ToolCallID] = e.Type
		s.answerOK(t, tool, e.SessionID, e.ReplyID, e.ToolCallID, answer)
	}
	if len(seen) != 3 || seen["a/c2"] != tConfirmReq || seen["a/c1"] != tExternalReq || seen["b/c1"] != tExternalReq {
		t.Errorf("requests seen: %v", seen)
	}
	done := checkBatchEvents(t, dedupeResults(evA.until(doneOf("r1"))), "a", "r1", "c1", "c2")
	wantSuccess(t, done[0], "late answer for a/c1")
	wantSuccess(t, done[1], "askme ran")
	done = checkBatchEvents(t, evB.until(doneOf("r1")), "b", "r1", "c1")
	wantSuccess(t, done[0], "late answer for b/c1")
	waitFor(t, func() error {
		if n := len(s.handoff(t, "toolbus.>")); n != 0 {
			return errorf("the handoff still hands out %d answered requests", n)
		}
		return nil
	})
}

// TestHandoffHoldsOnlyOpenRequests: while one call of a batch is answered
// and another is not, the handoff hands out exactly the open one.
func TestHandoffHoldsOnlyOpenRequests(t *testing.T) {
	s, _ := lifecycleFixture(t)
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "handoff"}))
	s.answerOK(t, "handoff", "s1", "r1", "c1", textAnswer("success", "one"))
	waitFor(t, func() error {
		rs := s.handoff(t, "toolbus.external.handoff")
		if len(rs) != 1 || rs[0].ToolCallID != "c2" {
			var ids []string
			for _, e := range rs {
				ids = append(ids, e.ToolCallID)
			}
			return errorf("the handoff hands out %v, want only c2", ids)
		}
		return nil
	})
	var p []struct {
		ID string `json:"id"`
	}
	raw, _ := json.Marshal(s.parkedList(t, "s1"))
	_ = json.Unmarshal(raw, &p)
	if len(p) != 1 || p[0].ID != "c2" {
		t.Errorf("parked.list %s, want only c2", raw)
	}
}
