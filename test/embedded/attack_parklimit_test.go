package embedded

import (
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/router"
)

// TestAttackResendAtParkLimit (red team, session 17): a session at its
// bound of parked calls re-sends a batch whose call is parked (it lost the
// reply). The copy counted the batch's own parked call against the bound
// and ended it limit_exceeded: its reply, its call.result event and the
// audit trail said the call failed while it was still parked, and its
// answer later made a second, different result for it. A re-sent batch
// that finds the first one parked gets the same reply and runs nothing
// (docs/protocol.md 3.1): the bound counts the session's other calls.
func TestAttackResendAtParkLimit(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{Limits: router.Limits{MaxParked: 1}})
	e.registerDefs(t, bus.ToolDef{Name: "ext_limit", External: true})
	const session, replyID = "park-limit", "r1"
	calls := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "ext_limit"}}}
	for _, copy := range []string{"first", "re-sent"} {
		r, err := e.client.Call(testCtx(t), session, calls, client.WithReplyID(replyID))
		if err != nil {
			t.Fatalf("%s copy: %v", copy, err)
		}
		if len(r.Results) != 0 || len(r.Parked) != 1 || r.Parked[0].ID != "c1" {
			t.Fatalf("%s copy: want c1 parked, got results %+v parked %+v", copy, r.Results, r.Parked)
		}
	}
	// The bound still holds for another batch.
	r, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "ext_limit"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 1 {
		t.Fatalf("another batch past the bound: %+v", r)
	}
	wantFailure(t, r.Results[0], bus.StateError, bus.CodeLimitExceeded, textOf(r.Results[0]))
}
