package router

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// Attack (session 40, cancelbound40): a cancel naming more than
// bus.MaxCancelCalls ids is bad input: the router reaches none of the
// session's batches, confirmed or parked calls (it answers
// io.toolbus.error); one at the bound reaches them.
func TestAttackCancelBound(t *testing.T) {
	rig := newWindowRig(t)
	reached := 0
	rig.cancels.running = func(session, replyID string) []*batch { reached++; return nil }
	rig.cancels.parked = func(_ context.Context, session, replyID string, ids []string) { reached++ }
	ids := make([]string, 1025) // bus.MaxCancelCalls+1
	for i := range ids {
		ids[i] = fmt.Sprintf("c%d", i)
	}
	rig.cancels.onCancel(cancelMsg(t, "s1", ids...))
	if reached != 0 {
		t.Fatalf("a cancel of %d ids reached the batches %d times, want 0", len(ids), reached)
	}
	e, err := bus.NewEvent(bus.TypeCallCancel, "test/agent", bus.Cancel{Calls: []string{"c1"}})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID, e.ReplyID = "s1", strings.Repeat("r", 4000)
	long, err := e.Msg(bus.NewSubjects("").Cancel("s1"))
	if err != nil {
		t.Fatal(err)
	}
	rig.cancels.onCancel(long)
	if reached != 0 {
		t.Fatal("a cancel of a reply id no batch may have reached the batches (held: bus.Decode refuses it)")
	}
	rig.cancels.onCancel(cancelMsg(t, "s1", ids[:1024]...))
	if reached == 0 {
		t.Fatal("a cancel at the bound reached no batch")
	}
}
