package embedded

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// TestClusterCancelEndsThroughOutage (parkend41): a call waiting for a
// confirmation is cancelled while the store refuses every write (the
// account's JetStream limit below what it holds: full, on a 3-node cluster
// with replicas 3), then the store comes back and an approver allows the
// call at once. The cancel was heard first: its end of the record, retried
// through the outage, decides. The allow is refused `not_parked`, during
// the outage as after it, the agent is told `interrupted` only once the
// record says cancelled, and the tool never runs. Before, the allow that
// came right after the outage was taken while the cancel's write slept
// between its retries: the confirmed call ran (or ended unavailable, its
// worker's beats refused too) after the agent cancelled it.
func TestClusterCancelEndsThroughOutage(t *testing.T) {
	e := newClusterEnv(t, 1)
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "wipe", Permission: bus.PermissionAsk, ConcurrencySafe: true, InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				runs.Add(1)
				return textResult("wiped"), nil
			})
	})
	e.waitLive("wipe")
	events := e.watch(t, "s1")
	r, err := e.client.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "wipe"}}}, client.WithReplyID("t1"))
	if err != nil || len(r.Parked) != 1 || r.Parked[0].Kind != bus.KindConfirm {
		t.Fatalf("the call did not park for a confirmation: %v %s", err, jsonOf(r))
	}
	allow := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*bound)
		defer cancel()
		return e.client.Parked().Answer(ctx, "wipe", "s1", "t1", "c1", bus.Answer{Confirmed: new(true)})
	}

	e.setAccountStore(t, 1) // the store refuses every write from now on
	defer e.setAccountStore(t, -1)
	if err := e.client.Cancel(testCtx(t), "s1", "t1"); err != nil {
		t.Fatal(err)
	}
	// The cancel reached the router when it refuses the allow for it
	// (polled: no other sign of it while nothing can be written).
	for deadline := time.Now().Add(3 * bound); ; {
		err := allow()
		if errors.Is(err, bus.ErrNotParked) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the allow during the outage: %s, want not_parked", errString(err))
			break
		}
		time.Sleep(20 * time.Millisecond) // a poll's interval, bounded above
	}
	e.setAccountStore(t, -1) // the store is back
	if err := allow(); !errors.Is(err, bus.ErrNotParked) {
		t.Errorf("the allow right after the outage: %s, want not_parked", errString(err))
	}
	var got bus.Result
	collect(t, events, func(ev *bus.Event) bool {
		if ev.Type == bus.TypeCallResult && ev.ToolCallID == "c1" {
			if err := ev.DataAs(&got); err != nil {
				t.Fatal(err)
			}
			return true
		}
		return false
	})
	if got.State != bus.StateInterrupted {
		t.Errorf("c1 ended %s, want interrupted", jsonOf(got))
	}
	if err := allow(); !errors.Is(err, bus.ErrNotParked) {
		t.Errorf("the allow once the cancel is recorded: %s, want not_parked", errString(err))
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times after its call was cancelled", n)
	}
}

func errString(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}
