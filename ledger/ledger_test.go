package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

func newTestLedger(t testing.TB, routers ...string) []*Ledger {
	return newTestLedgerLease(t, 0, routers...)
}

// newTestLedgerLease is newTestLedger with the routers' lease.
func newTestLedgerLease(t testing.TB, lease time.Duration, routers ...string) []*Ledger {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	st, err := store.Setup(t.Context(), js, bus.NewSubjects("toolbus"), store.Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []*Ledger
	for _, id := range routers {
		out = append(out, New(st.Ledger, Config{Router: id, Logger: slog.New(slog.DiscardHandler), Lease: lease}))
	}
	return out
}

func TestLedgerClaimOnce(t *testing.T) {
	ls := newTestLedger(t, "a", "b")
	ctx := t.Context()
	how, claim := ls[0].claim(ctx, "s.r.c1", time.Second, time.Time{}, digests{})
	if how != claimed || claim.rev == 0 {
		t.Fatalf("first claim: %v %+v", how, claim)
	}
	for _, l := range ls {
		if how, _ := l.claim(ctx, "s.r.c1", time.Second, time.Time{}, digests{}); how != duplicate {
			t.Fatalf("router %s claimed a held key: %v", l.cfg.Router, how)
		}
	}
	res := bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")}
	ls[0].Record(t.Context(), "s.r.c1", claim, res)
	for _, l := range ls {
		got := waitRes(l.wait(ctx, Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Second}))
		if got.State != bus.StateSuccess || textOf(got.Output) != "done" {
			t.Fatalf("router %s waited for %+v", l.cfg.Router, got)
		}
	}
}

// A duplicate that waits while the first run goes on gets its result the
// moment it is recorded.
func TestLedgerWaitForRunning(t *testing.T) {
	ls := newTestLedger(t, "a", "b")
	ctx := t.Context()
	_, claim := ls[0].claim(ctx, "s.r.c1", time.Minute, time.Time{}, digests{})
	got := make(chan bus.Result, 1)
	var waiting atomic.Bool
	go func() {
		waiting.Store(true)
		got <- waitRes(ls[1].wait(ctx, Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Minute}))
	}()
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if !waiting.Load() {
			return context.DeadlineExceeded
		}
		return nil
	})
	ls[0].Record(t.Context(), "s.r.c1", claim, bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("late")})
	select {
	case r := <-got:
		if textOf(r.Output) != "late" {
			t.Fatalf("waited for %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the duplicate never got the recorded result")
	}
}

// An abandoned claim (the claim's outcome was unknown, the call never ran)
// may be claimed again; a duplicate that finds it gets unavailable.
func TestLedgerAbandoned(t *testing.T) {
	ls := newTestLedger(t, "a", "b")
	ctx := t.Context()
	_, claim := ls[0].claim(ctx, "s.r.c1", time.Minute, time.Time{}, digests{})
	ls[0].Abandon("s.r.c1", claim.Claim)
	if err := ls[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := ls[0].kv.Get(ctx, "s.r.c1")
	if err != nil {
		t.Fatal(err)
	}
	var le Entry
	if err := json.Unmarshal(e.Value(), &le); err != nil || le.State != stateAbandoned {
		t.Fatalf("after abandon: %s %v", e.Value(), err)
	}
	if r := waitRes(ls[1].wait(ctx, Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Minute})); r.Error == nil || r.Error.Code != bus.CodeUnavailable {
		t.Fatalf("a wait on an abandoned claim: %+v", r)
	}
	if how, _ := ls[1].claim(ctx, "s.r.c1", time.Minute, time.Time{}, digests{}); how != claimed {
		t.Fatalf("an abandoned claim was not claimed again: %v", how)
	}
	// Abandoning someone else's claim changes nothing.
	ls[0].Abandon("s.r.c1", claim.Claim)
	if err := ls[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if how, _ := ls[0].claim(ctx, "s.r.c1", time.Minute, time.Time{}, digests{}); how != duplicate {
		t.Fatalf("a live claim was released by another's abandon: %v", how)
	}
}

// A run whose deadline and grace have passed without a record ends
// unknown_outcome; an ended context ends the wait interrupted.
func TestLedgerWaitGivesUp(t *testing.T) {
	ls := newTestLedger(t, "a", "b")
	ctx := t.Context()
	past := Entry{State: stateRunning, Router: "a", Claim: "old", Deadline: time.Now().Add(-2 * grace)}
	v, _ := json.Marshal(past)
	if _, err := ls[0].kv.Create(ctx, "s.r.c1", v); err != nil {
		t.Fatal(err)
	}
	if r := waitRes(ls[1].wait(ctx, Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: 0})); r.Error == nil || r.Error.Code != bus.CodeUnknownOutcome {
		t.Fatalf("a run long past its deadline: %+v", r)
	}
	_, _ = ls[0].claim(ctx, "s.r.c2", time.Minute, time.Time{}, digests{})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if r := waitRes(ls[1].wait(cctx, Call{Key: "s.r.c2", Call: bus.Call{ID: "c2", Name: "t"}, Timeout: time.Minute})); r.Error == nil || r.Error.Code != bus.CodeInterrupted {
		t.Fatalf("a cancelled wait: %+v", r)
	}
}

func waitRes(res bus.Result, _ *Entry) bus.Result { return res }

func textOf(blocks []bus.Block) string {
	var s string
	for _, b := range blocks {
		s += b.Text
	}
	return s
}

// A duplicate gets a result already recorded without waiting for its
// watch's stop, a consumer delete that takes up to 5 s on a cluster whose
// meta leader moves (held here at a gate): the stop runs in the
// background, counted, and the drain of the life that gives the ledger's
// Landing waits for it, as Stop does. Await likewise.
func TestLedgerWaitNotHeldByWatchStop(t *testing.T) {
	ls := newTestLedger(t, "a")
	ctx := t.Context()
	var logs testkit.Buffer
	lf := life.New(life.Config{Cleanup: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	gate := testkit.GateStops(ls[0].kv)
	t.Cleanup(gate.Open)
	b := New(gate, Config{Router: "b", Landing: lf.Landing})
	_, claim := ls[0].claim(ctx, "s.r.c1", time.Minute, time.Time{}, digests{})
	ls[0].Record(ctx, "s.r.c1", claim, bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")})

	got := make(chan bus.Result, 2)
	go func() {
		got <- waitRes(b.wait(ctx, Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Minute}))
	}()
	if r := testkit.Recv(t, got, 10*time.Second, "the duplicate's result, its watch's stop held"); textOf(r.Output) != "done" {
		t.Fatalf("waited for %+v", r)
	}
	go func() {
		r, _, _ := b.Await(ctx, "s.r.c1")
		got <- r
	}()
	if r := testkit.Recv(t, got, 10*time.Second, "Await's result, its watch's stop held"); textOf(r.Output) != "done" {
		t.Fatalf("awaited %+v", r)
	}
	for range 2 {
		testkit.Recv(t, gate.Stopping, 10*time.Second, "a watch's stop")
	}
	if n := b.stops.InFlight(); n != 2 {
		t.Fatalf("%d stops in flight, want 2", n)
	}
	over, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Stop(over); err == nil {
		t.Fatal("Stop returned nil with two stops in flight")
	}
	// A drain whose deadline has passed waits its cleanup window for them,
	// then says it cut them off.
	_ = lf.Drain(over)
	if !strings.Contains(logs.String(), "writes that must land cut off") {
		t.Fatalf("the drain did not wait for the stops: %q", logs.String())
	}
	gate.Open()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.stops.InFlight(); n != 0 {
		t.Fatalf("%d stops in flight after Stop", n)
	}
}

// A duplicate of a call whose result is recorded gets it from the entry its
// claim read: no watch is opened (each one a consumer created and deleted
// through the JetStream meta leader, per re-sent call), and the call does
// not run again.
func TestDuplicateOfRecordedOpensNoWatch(t *testing.T) {
	ls := newTestLedger(t, "a")
	ctx := t.Context()
	gate := testkit.GateStops(ls[0].kv)
	t.Cleanup(gate.Open)
	b := New(gate, Config{Router: "b"})
	c := Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Minute}
	ls[0].Once(ctx, c, func() bus.Result {
		return bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")}
	})
	res, _ := b.Once(ctx, c, func() bus.Result {
		t.Error("a recorded call ran again")
		return bus.Result{}
	})
	if textOf(res.Output) != "done" {
		t.Fatalf("duplicate got %+v", res)
	}
	if n := len(gate.Stopping) + b.stops.InFlight(); n != 0 {
		t.Fatalf("the duplicate opened %d watches", n)
	}
}

// A call a cancel ended before it started is recorded interrupted, and a
// re-send gets that result without running it (docs/protocol.md 3.5); a
// call that a run claimed first keeps its claim and its own result.
func TestLedgerInterrupt(t *testing.T) {
	ls := newTestLedger(t, "a", "b")
	ctx := t.Context()
	c := bus.Call{ID: "c1", Name: "t"}
	if err := ls[0].Interrupt(ctx, "s.r.c1", bus.InterruptedResult(c)); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	run := func() bus.Result { runs.Add(1); return bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess} }
	for _, l := range ls { // a re-send, on either router
		got, _ := l.Once(ctx, Call{Key: "s.r.c1", Call: c, Timeout: time.Second}, run)
		if got.State != bus.StateInterrupted || got.Error == nil || got.Error.Code != bus.CodeInterrupted || textOf(got.Output) != bus.InterruptedText {
			t.Fatalf("router %s: %+v", l.cfg.Router, got)
		}
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the cancelled call ran %d times", n)
	}

	// Claimed first: the interrupt changes nothing, the run records its result.
	how, claim := ls[0].claim(ctx, "s.r.c2", time.Second, time.Time{}, digests{})
	if how != claimed {
		t.Fatalf("claim: %v", how)
	}
	if err := ls[1].Interrupt(ctx, "s.r.c2", bus.InterruptedResult(bus.Call{ID: "c2", Name: "t"})); err != nil {
		t.Fatalf("interrupt of a claimed call: %v", err)
	}
	ls[0].Record(ctx, "s.r.c2", claim, bus.Result{ID: "c2", Name: "t", State: bus.StateSuccess, Output: bus.Text("ran")})
	got, _ := ls[1].Once(ctx, Call{Key: "s.r.c2", Call: bus.Call{ID: "c2", Name: "t"}, Timeout: time.Second}, run)
	if got.State != bus.StateSuccess || textOf(got.Output) != "ran" || runs.Load() != 0 {
		t.Fatalf("a re-send of the claimed call got %+v (ran %d)", got, runs.Load())
	}
}

// Calls run one after another through Once each store their own entry:
// the pooled buffers of claims and records are reused only once their
// write returned, and a record whose result outgrows the pool's bound is
// stored whole. A held claim fits a map slot (no allocation of its own).
func TestOnceReusedBuffers(t *testing.T) {
	if s := unsafe.Sizeof(held{}); s > 128 {
		t.Fatalf("held is %d bytes: the claims map keeps it in an allocation of its own past 128", s)
	}
	l := newTestLedger(t, "a")[0]
	if !l.reuse {
		t.Fatal("the ledger over a store.KV does not reuse its buffers")
	}
	ctx := t.Context()
	big := strings.Repeat("x", 2*maxPooled)
	for i := range 20 {
		id := fmt.Sprintf("c%d", i)
		out := fmt.Sprintf("out-%d", i)
		if i%5 == 4 {
			out = big
		}
		c := Call{Key: "s.r." + id, Call: bus.Call{ID: id, Name: "t"}, Digest: "d" + id, Timeout: time.Minute}
		res, landed := l.Once(ctx, c, func() bus.Result {
			return bus.Result{ID: id, Name: "t", State: bus.StateSuccess, Output: bus.Text(out)}
		})
		if textOf(res.Output) != out || !landed {
			t.Fatalf("%s: %+v, landed %v", id, res, landed)
		}
	}
	for i := range 20 {
		id := fmt.Sprintf("c%d", i)
		e, err := l.kv.Get(ctx, "s.r."+id)
		var le Entry
		if err != nil || json.Unmarshal(e.Value(), &le) != nil {
			t.Fatalf("%s: %v, %q", id, err, e.Value())
		}
		want := fmt.Sprintf("out-%d", i)
		if i%5 == 4 {
			want = big
		}
		if le.State != stateDone || le.Call != "d"+id || le.Result == nil || textOf(le.Result.Output) != want {
			t.Fatalf("%s stored %s", id, e.Value())
		}
	}
	if n := len(l.held.all()); n != 0 {
		t.Fatalf("%d claims still held", n)
	}
}

// TestClaimDeadlineWithinExpiry: a claim's deadline, which a durable
// result is judged by (a failure at or past it is the timeout), is the
// batch's expirytime when that comes first, and the one the router then
// gives the worker: a worker failing at its deadline is never recorded as
// a tool error because the claim was taken later than the exec's deadline
// was computed (CI's TestOnCluster/DurableTimeout under load).
func TestClaimDeadlineWithinExpiry(t *testing.T) {
	l := newTestLedger(t, "a")[0]
	expiry := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		key     string
		timeout time.Duration
		expiry  time.Time
		within  func(time.Time) bool
	}{
		{"s.r.c1", time.Hour, expiry, func(d time.Time) bool { return d.Equal(expiry) }},
		{"s.r.c2", time.Second, expiry, func(d time.Time) bool { return d.Before(expiry) }},
		{"s.r.c3", time.Second, time.Time{}, func(d time.Time) bool { return time.Until(d) <= time.Second }},
	} {
		how, claim := l.claim(t.Context(), tc.key, tc.timeout, tc.expiry, digests{})
		if how != claimed || !tc.within(claim.Deadline) {
			t.Fatalf("%s: %v, deadline %v (expiry %v, timeout %v)", tc.key, how, claim.Deadline, tc.expiry, tc.timeout)
		}
	}
}

// TestRecordResultCancel: the cancel a durable worker's interrupted result
// names is kept with that result, and Await gives it to the router awaiting
// the call, on another router too (1.32); a result recorded as the call's
// timeout (a failure past its deadline) keeps none.
func TestRecordResultCancel(t *testing.T) {
	ls := newTestLedger(t, "a", "b")
	ctx := t.Context()
	for _, tc := range []struct {
		key     string
		timeout time.Duration
		want    string
		state   string
	}{
		{"s.r.c1", time.Minute, "cancel-1", bus.StateInterrupted},
		{"s.r.c2", -time.Second, "", bus.StateError}, // recorded as late: its deadline passed
	} {
		_, claim := ls[0].claim(ctx, tc.key, tc.timeout, time.Time{}, digests{})
		if claim.rev == 0 {
			t.Fatalf("%s: not claimed", tc.key)
		}
		call := bus.Call{ID: "c", Name: "job"}
		ack, err := ls[1].RecordResult(ctx, tc.key, bus.InterruptedResult(call), bus.TimeoutResult(call, time.Second), "cancel-1")
		if err != nil || !ack.Recorded {
			t.Fatalf("%s: recorded %+v, %v", tc.key, ack, err)
		}
		res, cancel, ok := ls[0].Await(ctx, tc.key)
		if !ok || res.State != tc.state || cancel != tc.want {
			t.Errorf("%s: awaited %s naming %q (%v), want %s naming %q", tc.key, res.State, cancel, ok, tc.state, tc.want)
		}
	}
}
