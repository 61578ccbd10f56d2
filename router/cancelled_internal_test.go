package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// workerHeardFirst runs the batch c1 (a side effect, alone) then c2 (an
// external tool or a confirm-policy one), whose worker ends c1 interrupted
// at a cancel of the reply before this router handles it (3.5: whichever
// acts first), naming the cancel (1.30); deliver gets the cancel once the
// batch waits for it, or drops it when nil.
func workerHeardFirst(t *testing.T, rig *windowRig, parks string, deliver func(b *batch, cancel func())) *batch {
	m := cancelMsg(t, "s1")
	e, err := bus.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	b := rig.f.batchOf(t, "", call("c1", "write"), call("c2", parks))
	rig.f.p.exec = ExecFunc(func(ctx context.Context, j *job) bus.Result {
		j.cancelledBy = e.ID // as requestReply reads it off the worker's result
		return interrupted(j.call)
	})
	return runDelivering(t, rig, b, m, nil, deliver)
}

// runDelivering runs b tracked, and beside it, once ready yields (nil: at
// once) and without an error, gives deliver (nil: none) the cancel m.
func runDelivering(t *testing.T, rig *windowRig, b *batch, m *nats.Msg, ready <-chan error, deliver func(b *batch, cancel func())) *batch {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ready != nil {
			if err := <-ready; err != nil {
				t.Error(err)
				return
			}
		}
		if deliver != nil {
			deliver(b, func() { rig.cancels.onCancel(m) })
		}
	}()
	rig.batches.track(b)
	b.run(0)
	rig.batches.untrack(b)
	<-done
	rig.work.Wait()
	return b
}

// TestWorkerCancelHoldsNextRun: a worker that hears a cancel first ends its
// call interrupted and names the cancel (1.30); the batch's next run waits
// until this router has handled that cancel, so the call the cancel ends
// there (an external or confirm-policy call) never parks. Before, the next
// run started at the worker's result and parked c2 after the cancel
// (docs/router.md, the Left of "a cancel records before it stops").
func TestWorkerCancelHoldsNextRun(t *testing.T) {
	eachParkingTool(t, func(t *testing.T, rig *windowRig, parks string) {
		wantHeld(t, rig, workerHeardFirst(t, rig, parks, cancelOnceHeld(t)))
	})
}

// cancelOnceHeld delivers a cancel once the batch's next run waits for it,
// or once c2 parks (a router that does not wait: the test then fails).
func cancelOnceHeld(t *testing.T) func(b *batch, cancel func()) {
	return func(b *batch, cancel func()) {
		testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
			b.heard.mu.Lock()
			waits := b.heard.hearing != nil
			b.heard.mu.Unlock()
			b.mu.Lock()
			parking := b.calls[1].parking
			b.mu.Unlock()
			if !waits && !parking {
				return errors.New("the batch neither waits for the cancel nor parks c2")
			}
			return nil
		})
		cancel()
	}
}

// wantHeld checks the batch c1, c2 that a cancel of both ended, c1 first by
// its worker's word: c2 ended interrupted and nothing parked.
func wantHeld(t *testing.T, rig *windowRig, b *batch) {
	t.Helper()
	for _, c := range b.calls {
		if res := c.result; res == nil || res.State != bus.StateInterrupted {
			t.Errorf("%s's result %+v, want interrupted", c.call.ID, res)
		}
	}
	if len(b.parked) != 0 {
		t.Errorf("parked %+v after the cancel", b.parked)
	}
	if recs := rig.parked.Read.Parked("s1", "r1"); len(recs) != 0 {
		t.Errorf("%d calls parked after the cancel", len(recs))
	}
}

// TestWorkerCancelBounded: a worker's word ends nothing: a result naming a
// cancel this router never gets (a lying worker, or one lost) delays the
// batch's next run by cancelWait, then the run goes on as if none came.
func TestWorkerCancelBounded(t *testing.T) {
	rig := newWindowRig(t)
	start := time.Now()
	wantBounded(t, workerHeardFirst(t, rig, "ext", nil), start)
}

// wantBounded checks the batch c1, c2 (ext) whose c1 named a cancel that
// never came, run from start: c2 parked, after cancelWait.
func wantBounded(t *testing.T, b *batch, start time.Time) {
	t.Helper()
	if took := time.Since(start); took < cancelWait {
		t.Errorf("the next run started after %v, before the cancel's bound %v", took, cancelWait)
	}
	if res := b.calls[1].result; res != nil && res.State == bus.StateInterrupted {
		t.Errorf("c2 ended interrupted on the worker's word alone: %+v", res)
	}
	if len(b.parked) != 1 || b.parked[0].ID != "c2" {
		t.Errorf("parked %+v, want c2", b.parked)
	}
}

// TestExecReplyCancel: the cancel an interrupted result names is read off
// it, in the plain form and in full; any other state's is ignored.
func TestExecReplyCancel(t *testing.T) {
	call := bus.Call{ID: "c1", Name: "echo"}
	for _, tc := range []struct{ data, want string }{
		{`{"state":"interrupted","output":[],"cancel":"k1"}`, "k1"},
		{`{"state":"interrupted","output":[], "cancel":"k\u0031"}`, "k1"},
		{`{"state":"interrupted","output":[]}`, ""},
		{`{"state":"success","output":[],"cancel":"k1"}`, ""},
		{`{"state":"interrupted","output":[],"cancel":"k.1"}`, ""},
	} {
		res, _, by := execReply(call, callRef{"s1", "", "c1"}, execMsg(t, bus.TypeExecResult, tc.data))
		if by != tc.want {
			t.Errorf("%s: cancel %q (result %+v), want %q", tc.data, by, res, tc.want)
		}
	}
}
