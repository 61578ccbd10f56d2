package embedded

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestAttackResendOtherCalls (red team, session 17; docs/protocol.md 3.1,
// 1.12): a second batch under the reply id of a parked one, with a call the
// first never had, adopted the first's continuation; its reply listed the
// new call as queued behind the parked one, and it never ran nor ended (on
// main the second copy's reply lists c2, and batch.done has no result for
// it). A copy whose calls (ids, names, inputs, in order) differ from the
// batch parked under its reply id is refused whole with bad_request naming
// the first call that differs, and changes nothing: no record of its new
// calls stays, the first batch completes as it was sent. A copy with the
// same calls is still adopted.
func TestAttackResendOtherCalls(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ext_other", External: true})
	const session, replyID = "resend-other", "r1"
	ev := e.watch(t, session)
	c1 := bus.Call{ID: "c1", Name: "ext_other", Input: json.RawMessage(`{"q":"one"}`)}
	first, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{c1}}, client.WithReplyID(replyID))
	if err != nil || len(first.Parked) != 1 {
		t.Fatalf("first copy: %+v %v", first, err)
	}
	c2 := bus.Call{ID: "c2", Name: "ext_other"}
	for _, tc := range []struct {
		name  string
		calls []bus.Call
		want  string
	}{
		{"a call more", []bus.Call{c1, c2}, "call c2 (ext_other) is not in that batch"},
		{"a call more first", []bus.Call{c2, c1}, "call c2 (ext_other) is not in that batch"},
		{"another input", []bus.Call{{ID: "c1", Name: "ext_other", Input: json.RawMessage(`{"q":"two"}`)}}, "call c1 (ext_other) has another input"},
		{"another tool", []bus.Call{{ID: "c1", Name: "ext_more", Input: c1.Input}}, "call c1 names tool ext_more here and ext_other"},
	} {
		got, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: tc.calls}, client.WithReplyID(replyID))
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, tc.want) {
			t.Fatalf("%s: copy %+v got %+v, %v; want bad_request %q", tc.name, tc.calls, got, err, tc.want)
		}
	}
	// The same calls, the input a string holding the same object with its
	// members in another order: a copy, adopted as before.
	again, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "ext_other", Input: json.RawMessage(`" {\"q\": \"one\"} "`)}}},
		client.WithReplyID(replyID))
	if err != nil || len(again.Parked) != 1 || again.Parked[0].ID != "c1" {
		t.Fatalf("an equal copy: %+v %v", again, err)
	}
	// Nothing of the refused copies was recorded: c2 was never parked.
	wantCode(t, e.answer(t, "ext_other", session, replyID, "c2", bus.Answer{State: bus.StateSuccess, Output: bus.Text("two")}), bus.CodeNotParked)
	if err := e.answer(t, "ext_other", session, replyID, "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("one")}); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ev, batchDone(replyID))
	var done bus.BatchDone
	if err := evs[len(evs)-1].DataAs(&done); err != nil {
		t.Fatal(err)
	}
	if len(done.Results) != 1 || done.Results[0].ID != "c1" || done.Results[0].State != bus.StateSuccess {
		t.Fatalf("batch.done: %+v", done.Results)
	}
	for _, ev := range evs {
		if ev.Type == bus.TypeCallResult && ev.ToolCallID == "c2" {
			t.Fatalf("a refused copy's call has a result: %+v", ev)
		}
	}
}

// TestAttackResendOtherCallsContinuation is TestAttackResendOtherCalls for a
// batch with a continuation of its own (two waits, docs/protocol.md 6.1):
// the copy's create of the continuation conflicts, and its calls are
// compared with the continuation's before it joins.
func TestAttackResendOtherCallsContinuation(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ext_other", External: true})
	const session, replyID = "resend-other-cont", "r1"
	ev := e.watch(t, session)
	c1, c2, c3 := bus.Call{ID: "c1", Name: "ext_other"}, bus.Call{ID: "c2", Name: "ext_other"}, bus.Call{ID: "c3", Name: "ext_other"}
	first, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{c1, c2}}, client.WithReplyID(replyID))
	if err != nil || len(first.Parked) != 2 {
		t.Fatalf("first copy: %+v %v", first, err)
	}
	got, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{c1, c3}}, client.WithReplyID(replyID))
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "call c3 (ext_other) is not in that batch") {
		t.Fatalf("copy with c3: %+v, %v; want bad_request", got, err)
	}
	wantCode(t, e.answer(t, "ext_other", session, replyID, "c3", bus.Answer{State: bus.StateSuccess, Output: bus.Text("three")}), bus.CodeNotParked)
	for _, id := range []string{"c1", "c2"} {
		if err := e.answer(t, "ext_other", session, replyID, id, bus.Answer{State: bus.StateSuccess, Output: bus.Text(id)}); err != nil {
			t.Fatal(err)
		}
	}
	evs := collect(t, ev, batchDone(replyID))
	var done bus.BatchDone
	if err := evs[len(evs)-1].DataAs(&done); err != nil {
		t.Fatal(err)
	}
	if len(done.Results) != 2 || done.Results[0].ID != "c1" || done.Results[1].ID != "c2" {
		t.Fatalf("batch.done: %+v", done.Results)
	}
}

// TestAttackResendOtherInput (docs/protocol.md 3.1, 1.12): a copy of a batch
// that ran, under its reply id, whose call has the same id and another input
// (or tool), got the first call's recorded result from the ledger on main: a
// result of another call. The ledger keeps a digest of the call's tool and
// input with its claim; the copy's call gets bad_request and does not run.
// A copy with the same call still gets the recorded result.
func TestAttackResendOtherInput(t *testing.T) {
	e := newEnv(t, 1)
	wt := e.addWriteTools(t)
	const session, replyID = "resend-other-input", "r1"
	e.setMode(t, session, "bypass")
	call := func(input string) bus.Result {
		t.Helper()
		got, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{{ID: "w1", Name: "write", Input: json.RawMessage(input)}}},
			client.WithReplyID(replyID))
		if err != nil || len(got.Results) != 1 {
			t.Fatalf("batch with input %s: %+v, %v", input, got, err)
		}
		return got.Results[0]
	}
	if first := call(`{"v":1}`); first.State != bus.StateSuccess {
		t.Fatalf("first: %+v", first)
	}
	other := call(`{"v":2}`)
	if other.State != bus.StateError || other.Error == nil || other.Error.Code != bus.CodeBadRequest ||
		!strings.Contains(other.Error.Message, "another tool or input") {
		t.Fatalf("a copy with another input got %+v; want bad_request, never the first call's result", other)
	}
	if again := call(` {"v": 1} `); again.State != bus.StateSuccess || !strings.Contains(again.Output[0].Text, `{"v":1}`) {
		t.Fatalf("an equal copy: %+v", again)
	}
	if n := wt.runs.Load(); n != 1 {
		t.Fatalf("write ran %d times, want 1", n)
	}
}

// TestResendEncodedAgain (docs/protocol.md 3.1, 1.13): a copy of a batch
// that ran, re-encoded by the agent so that its call's input holds the same
// JSON value with its members in another order (and a number and a string
// written otherwise), got bad_request for its call on 1.12 ("another tool or
// input": the ledger compared compacted inputs) where SameCalls took it for
// the same call. It gets the first call's result, and the call runs once.
func TestResendEncodedAgain(t *testing.T) {
	e := newEnv(t, 1)
	wt := e.addWriteTools(t)
	const session, replyID = "resend-encoded-again", "r1"
	e.setMode(t, session, "bypass")
	call := func(input string) bus.Result {
		t.Helper()
		got, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{{ID: "w1", Name: "write", Input: json.RawMessage(input)}}},
			client.WithReplyID(replyID))
		if err != nil || len(got.Results) != 1 {
			t.Fatalf("batch with input %s: %+v, %v", input, got, err)
		}
		return got.Results[0]
	}
	first := call(`{"v":1,"note":"caf\u00e9","size":2.0}`)
	if first.State != bus.StateSuccess {
		t.Fatalf("first: %+v", first)
	}
	again := call(`{"size":2,"note":"café","v":1}`)
	if again.State != bus.StateSuccess || again.Output[0].Text != first.Output[0].Text {
		t.Fatalf("a copy encoded again got %+v; want the first call's result %+v", again, first)
	}
	if other := call(`{"size":2,"note":"café","v":2}`); other.Error == nil || other.Error.Code != bus.CodeBadRequest {
		t.Fatalf("a copy with another input got %+v; want bad_request", other)
	}
	if n := wt.runs.Load(); n != 1 {
		t.Fatalf("write ran %d times, want 1", n)
	}
}
