package router

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/replies"
	"github.com/toolbus/toolbus/registry"
)

// durableHeardFirst runs the batch c1 (a durable side effect, alone, through
// the real work queue and ledger) then c2 (parks), whose worker ends c1
// interrupted at a cancel of the reply, naming it (1.30), in its durable
// result on P.result.job (5.8), which this router records before it handles
// the cancel. deliver gets the cancel once c1's result is recorded,
// or nil: the cancel never comes.
func durableHeardFirst(t *testing.T, rig *windowRig, parks string, deliver func(b *batch, cancel func())) *batch {
	t.Helper()
	m := cancelMsg(t, "s1", "c1", "c2")
	ce, err := bus.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	rig.f.resolver.known["job"] = tool(t, bus.ToolDef{Name: "job", Durable: true, TimeoutMS: 60000, Permission: bus.PermissionAllow})
	w := rig.cancels.wire
	reg := registry.New(rig.st, registry.Config{})
	results := &durableResults{wire: w, reg: reg, led: rig.f.p.ledger,
		seal: func(_, _ string, res bus.Result, patch json.RawMessage) (bus.Result, json.RawMessage) {
			return res, patch
		}}
	rsub, err := rig.nc.Subscribe(w.subj.All("result"), results.onResult)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rsub.Unsubscribe() })
	queue := workQueue{wire: w, js: rig.st.JS, led: rig.f.p.ledger, progress: replies.New(rig.nc, replies.Options{})}
	rig.f.p.exec = ExecFunc(queue.Exec)
	// The worker: it takes the call off the queue and, having heard the
	// cancel first, reports it interrupted, naming the cancel.
	recorded := make(chan error, 1)
	wsub, err := rig.nc.Subscribe(w.subj.Workers.Work("job"), func(work *nats.Msg) {
		x, err := bus.Decode(work)
		if err != nil {
			recorded <- err
			return
		}
		res, err := bus.NewEvent(bus.TypeExecResult, "toolbus/worker/w1", bus.ExecResult{State: bus.StateInterrupted, Output: []bus.Block{}, Cancel: ce.ID})
		if err != nil {
			recorded <- err
			return
		}
		res.SessionID, res.ReplyID, res.ToolCallID = x.SessionID, x.ReplyID, x.ToolCallID
		rm, err := res.Msg(w.subj.Workers.Result("job"))
		if err != nil {
			recorded <- err
			return
		}
		go func() {
			reply, err := rig.nc.RequestMsg(rm, 10*time.Second)
			if err == nil {
				var ack bus.ExecRecorded
				if e, derr := bus.Decode(reply); derr != nil {
					err = derr
				} else if err = e.DataAs(&ack); err == nil && !ack.Recorded {
					err = errors.New("not recorded: " + ack.Reason)
				}
			}
			recorded <- err
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wsub.Unsubscribe() })
	if err := rig.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return runDelivering(t, rig, rig.f.batchOf(t, "", call("c1", "job"), call("c2", parks)), m, recorded, deliver)
}

// TestDurableCancelHoldsNextRun: a durable tool's worker that hears a
// cancel first names it in its interrupted result on P.result (5.8), and
// the batch's next run waits until this router has handled that cancel, as
// for an exec reply (1.30): c2, which the cancel names, never parks. Before
// (session 41's Left), the durable path dropped the member: the run went on
// at the ledger's result and c2 parked after the cancel.
func TestDurableCancelHoldsNextRun(t *testing.T) {
	eachParkingTool(t, func(t *testing.T, rig *windowRig, parks string) {
		wantHeld(t, rig, durableHeardFirst(t, rig, parks, cancelOnceHeld(t)))
	})
}

// TestDurableCancelBounded: a durable result naming a cancel nobody sent
// (a lying worker, or a router not subscribed yet) delays the batch's next
// run by cancelWait, then the run goes on as if none came: the worker's
// word ends nothing (docs/security.md).
func TestDurableCancelBounded(t *testing.T) {
	rig := newWindowRig(t)
	start := time.Now()
	wantBounded(t, durableHeardFirst(t, rig, "ext", nil), start)
}
