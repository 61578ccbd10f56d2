package router

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
)

// TestCancelEndsBeforeAnswer (parkend41): a cancel of a call that waits for
// a confirmation, whose record's end the store refuses for a while (the
// write retried through the outage), is recorded once the store is back,
// and an approver's allow that comes meanwhile is refused: the call never
// runs, and the agent is told interrupted only by the write that ended the
// record. The cancel comes once the call parked, or while its park is in
// flight (the window of docs/security.md's session-40 row). Before, a call
// cancelled while parking was reported interrupted at once, and the allow
// was taken while the cancel's write still retried: the tool ran after the
// agent was told its call was interrupted.
func TestCancelEndsBeforeAnswer(t *testing.T) {
	for _, window := range []string{"parked", "parking"} {
		t.Run(window, func(t *testing.T) {
			rig := newWindowRig(t)
			def := bus.ToolDef{Name: "ask", Permission: bus.PermissionAsk, ConcurrencySafe: true}
			rig.f.resolver.known["ask"] = tool(t, def)
			var runs atomic.Int32
			rig.answers.reg = &fakeTools{tools: map[string]*registry.Tool{"ask": tool(t, def)}}
			rig.answers.groups = fakeRules{}
			rig.answers.runTool = func(context.Context, *job) bus.Result {
				runs.Add(1)
				return bus.Result{ID: "c1", Name: "ask", State: bus.StateSuccess, Output: bus.Text("ran")}
			}
			// The store refuses the cancel's writes until recovered: its
			// retry (store.UntilLanded) holds the writer until then.
			recovered, writing := make(chan struct{}), make(chan struct{})
			record := rig.cancels.parked
			rig.cancels.parked = func(ctx context.Context, session, replyID string, ids []string) {
				close(writing)
				<-recovered
				record(ctx, session, replyID, ids)
			}
			b := rig.f.batchOf(t, "", call("c1", "ask"))
			if window == "parking" {
				rig.f.p.park.conts = parkHook{rig.f.p.park.conts, func() { rig.cancels.onCancel(cancelMsg(t, "s1")) }}
			}
			rig.batches.track(b)
			b.run(0)
			rig.batches.untrack(b)
			if window == "parked" {
				rig.cancels.onCancel(cancelMsg(t, "s1"))
			}
			<-writing
			if res, ok := rig.events.result("c1"); ok {
				t.Errorf("the agent was told %s before the cancel was recorded", res.State)
			}
			// An approver allows the call while the cancel's write retries.
			if err := rig.approve(t, "ask", "c1"); !errors.Is(err, bus.ErrNotParked) {
				t.Errorf("the allow during the cancel's retry got %v, want not_parked", err)
			}
			close(recovered)
			rig.work.Wait()
			testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
				if _, ok := rig.events.result("c1"); !ok {
					return errors.New("no call.result")
				}
				return nil
			})
			if res, _ := rig.events.result("c1"); res.State != bus.StateInterrupted {
				t.Errorf("c1 ended %s, want interrupted", res.State)
			}
			if err := rig.approve(t, "ask", "c1"); !errors.Is(err, bus.ErrNotParked) {
				t.Errorf("the allow after the cancel got %v, want not_parked", err)
			}
			rec, err := rig.parked.Read.Get(t.Context(), bus.CallKey("s1", "r1", "c1"))
			if err != nil || rec.Status != bus.ParkCancelled {
				t.Errorf("c1's record %+v (%v), want cancelled", rec, err)
			}
			if n := runs.Load(); n != 0 {
				t.Errorf("the tool ran %d times after its call was cancelled", n)
			}
		})
	}
}

// approve sends an approver's allow of call id of tool (session s1, reply
// r1) through the rig's answers: nil when accepted, else the router's error.
func (rig *windowRig) approve(t *testing.T, tool, id string) error {
	t.Helper()
	e, err := bus.NewEvent(bus.TypeAnswer, "test/approver", bus.Answer{Confirmed: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID, e.ReplyID, e.ToolCallID = "s1", "r1", id
	subj := bus.NewSubjects("").Handoffs.Approve(tool)
	m, err := e.Msg(subj)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := rig.nc.Subscribe(subj, rig.answers.onApprove)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	reply, err := rig.nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bus.Decode(reply)
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != bus.TypeError {
		return nil
	}
	be := new(bus.Error)
	if err := got.DataAs(be); err != nil {
		t.Fatal(err)
	}
	return be
}
