package embedded

import (
	"errors"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestAttackResendOtherCalls (red team, session 17): a second batch under
// the reply id of a parked one, with a call the first never had, adopts the
// first's continuation (docs/protocol.md 1.10). Its reply lists the new
// call as queued behind the parked one, so the agent waits for it; but the
// batch resumes from the first copy's calls, its batch.done has no result
// for it, and it can never be answered: a call silently dropped, where bad
// input should get a clear error and change nothing. Fix (not small, in
// router/park.go adopt and parked, which other helpers edit): a copy whose
// calls (ids, names, inputs) differ from the continuation's Data is refused
// bad_request ("reply id <r> was sent with other calls") before its reply,
// and its own records (parked by join) are not written; better, compare a
// digest of the calls stored with the continuation and the ledger entry.
func TestAttackResendOtherCalls(t *testing.T) {
	t.Skip("redteam: a re-sent copy with a call the first copy never had lists it queued, and it never runs nor ends (fails on main)")
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ext_other", External: true})
	const session, replyID = "resend-other", "r1"
	ev := e.watch(t, session)
	first, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "ext_other"}}}, client.WithReplyID(replyID))
	if err != nil || len(first.Parked) != 1 {
		t.Fatalf("first copy: %+v %v", first, err)
	}
	second, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "ext_other"}, {ID: "c2", Name: "ext_other"}}},
		client.WithReplyID(replyID))
	var be *bus.Error
	if errors.As(err, &be) && be.Code == bus.CodeBadRequest {
		return // refused: nothing changed
	}
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, r := range second.Results {
		listed[r.ID] = true
	}
	for _, p := range second.Parked {
		listed[p.ID] = true
	}
	if !listed["c2"] {
		t.Fatalf("the second copy's reply does not mention c2: %+v", second)
	}
	if err := e.answer(t, "ext_other", session, replyID, "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("one")}); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ev, batchDone(replyID))
	var done bus.BatchDone
	if err := evs[len(evs)-1].DataAs(&done); err != nil {
		t.Fatal(err)
	}
	for _, r := range done.Results {
		if r.ID == "c2" {
			return
		}
	}
	t.Fatalf("c2 was listed %s in the second copy's reply, but batch.done has no result for it: %+v", second.Parked, done.Results)
}
