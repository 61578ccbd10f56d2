package router

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/store"
)

// resultEvents is fakeEvents that keeps the result of each call.result.
type resultEvents struct {
	fakeEvents
	rmu     sync.Mutex
	results map[string]bus.Result
}

func (f *resultEvents) publish(id, typ, session, replyID, callID string, trace [2]string, data any) (*sentEvent, error) {
	if typ == bus.TypeCallResult {
		var res bus.Result
		raw, ok := data.([]byte)
		if !ok {
			raw, _ = json.Marshal(data)
		}
		_ = json.Unmarshal(raw, &res)
		f.rmu.Lock()
		f.results[callID] = res
		f.rmu.Unlock()
	}
	return f.fakeEvents.publish(id, typ, session, replyID, callID, trace, data)
}

func (f *resultEvents) result(id string) (bus.Result, bool) {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	r, ok := f.results[id]
	return r, ok
}

// windowRig is one router's cancel path and continuations over a real
// P_parked (nats-server with JetStream), with the batch pipeline's other
// ports faked: what answers.complete and onCancel drive.
type windowRig struct {
	f       *fakePipeline
	nc      *nats.Conn
	st      *store.Store
	ledger  jetstream.KeyValue // P_ledger
	events  *resultEvents
	parked  *parked.Store
	conts   *continuations
	cancels *canceller
	answers *answers
	batches *runningBatches
	work    sync.WaitGroup // a cancel's waits for parks in flight (canceller.work)
}

func newWindowRig(t *testing.T) *windowRig {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	subj := bus.NewSubjects("")
	st, err := store.Setup(t.Context(), js, subj, store.Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	led := st.Ledger
	ps := parked.New(st, subj, parked.Config{Owner: "r1", Source: "toolbus/router/r1"})
	if err := ps.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, ps.Stop)
	// ext parks (an external tool); write is a side effect that runs
	// alone (not concurrency-safe), so it is queued behind ext.
	f := newFakePipeline(t, bus.ToolDef{Name: "ext", External: true, ConcurrencySafe: true}, bus.ToolDef{Name: "write"})
	ev := &resultEvents{results: map[string]bus.Result{}}
	f.p.report.events = ev
	f.p.conts, f.p.park.conts = parkedPort(ps), parkedPort(ps)
	f.p.ledger = ledger.New(led, ledger.Config{Router: "r1"})
	w := &wire{nc: nc, subj: subj, source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler), base: context.Background(),
		m: metrics.NewRouter(nil, metrics.RouterSources{}),
		landing: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Minute)
		}}
	rb := &runningBatches{}
	ends := &cancelEnds{}
	ans := &answers{wire: w, parked: parkedPort(ps), events: ev, confirming: &confirmed{}, cancelling: ends.names}
	conts := &continuations{wire: w, parked: ps, answers: ans, pipe: f.p, batches: rb}
	ans.resume = conts.resume
	rig := &windowRig{f: f, nc: nc, st: st, ledger: led, events: ev, parked: ps, conts: conts, answers: ans, batches: rb}
	rig.cancels = &canceller{wire: w, running: rb.running, confirming: ans.confirming, parked: conts.cancelParked,
		knows: ps.Read.Knows, ends: ends,
		work: func(fn func(context.Context)) bool { rig.work.Go(func() { fn(t.Context()) }); return true }}
	t.Cleanup(rig.work.Wait)
	return rig
}

// cancelMsg is io.toolbus.call.cancel of session s1, reply r1, naming
// calls, sent on P.cancel.<on> (an agent's credentials allow its own
// session's subject only).
func cancelMsg(t *testing.T, on string, calls ...string) *nats.Msg {
	t.Helper()
	e, err := bus.NewEvent(bus.TypeCallCancel, "test/agent", bus.Cancel{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID, e.ReplyID = "s1", "r1"
	m, err := e.Msg(bus.NewSubjects("").Cancel(on))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCancelInResumeWindow: a cancel that reaches the router resuming a
// batch after the compare-and-set that gave it the batch and before the
// batch is tracked as running (docs/protocol.md 3.5) still keeps the queued
// call it names from starting. The cancel is delivered in that window
// exactly: between parked.Store.Resume, which the router's answer ran, and
// continuations.resume, which tracks the batch, as answers.complete calls
// them. Before, no router marked the continuation (none had a parked call
// of the reply any more) and the resumed batch ran the call.
func TestCancelInResumeWindow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		on    string   // the session of the cancel's subject
		calls []string // what the cancel names: the queued call, or every call
	}{
		{"the queued call", "s1", []string{"c2"}},
		{"every call", "s1", nil},
		// The session is the subject's, which NATS confines to the
		// agent's own: a cancel naming s1 on s2's subject is refused, and
		// the call runs.
		{"from another session", "s2", []string{"c2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newWindowRig(t)
			b := rig.f.batchOf(t, "", call("c1", "ext"), call("c2", "write"))
			rig.batches.track(b)
			if b.run(0) {
				t.Fatal("the batch did not park")
			}
			rig.batches.untrack(b)
			if !slices.EqualFunc(b.parked, []string{"c1", "c2"}, func(p bus.Parked, id string) bool { return p.ID == id }) ||
				b.parked[1].Kind != bus.KindQueued {
				t.Fatalf("parked %+v, want c1 external and c2 queued", b.parked)
			}
			got, err := rig.parked.Answer(t.Context(), bus.CallKey("s1", "r1", "c1"), "ext",
				&bus.Answer{State: bus.StateSuccess, Output: bus.Text("picked")},
				func(rec *parked.Record, a *bus.Answer) (parked.Verdict, bus.Result, error) {
					return parked.Done, answerResult(rec.Call, a), nil
				})
			if err != nil {
				t.Fatal(err)
			}
			cont, resume, err := rig.parked.Resume(t.Context(), got.Record, *got.Record.Result, func(*parked.Batch) {})
			if err != nil || !resume {
				t.Fatalf("resume %v %v", resume, err)
			}
			// The window: this router has the batch, nothing tracks it yet.
			if n := len(rig.parked.Read.Parked("s1", "r1")); n != 0 {
				t.Fatalf("%d calls of the batch still parked", n)
			}
			rig.cancels.onCancel(cancelMsg(t, tc.on, tc.calls...))
			rig.work.Wait() // its writes, tracked work
			rig.conts.resume(cont)

			rig.f.runner.mu.Lock()
			ran := slices.Clone(rig.f.runner.tools)
			rig.f.runner.mu.Unlock()
			if tc.on != "s1" {
				if !slices.Equal(ran, []string{"c2"}) {
					t.Fatalf("ran %v: another session's cancel stopped s1's call", ran)
				}
				return
			}
			if slices.Contains(ran, "c2") {
				t.Fatalf("the cancelled queued call ran (ran %v)", ran)
			}
			res, ok := rig.events.result("c2")
			if !ok || res.State != bus.StateInterrupted || res.Error == nil || res.Error.Code != bus.CodeInterrupted {
				t.Fatalf("c2's result %+v (published %v), want interrupted", res, ok)
			}
			// A re-sent copy gets the same result from the ledger (3.1).
			var entry ledger.Entry
			if e, err := rig.ledger.Get(t.Context(), bus.CallKey("s1", "r1", "c2")); err != nil {
				t.Fatalf("c2 has no ledger entry: %v", err)
			} else if err := json.Unmarshal(e.Value(), &entry); err != nil || entry.State != "done" ||
				entry.Result == nil || entry.Result.State != bus.StateInterrupted {
				t.Fatalf("c2's ledger entry %s", e.Value())
			}
			if _, err := rig.parked.Read.Batch(t.Context(), "s1", "r1"); !store.IsNotFound(err) {
				t.Fatalf("the continuation is left after batch.done: %v", err)
			}
		})
	}
}

// TestTaskCancelLeavesBatches: the cancel a router publishes to stop a
// background task's run at its worker (background.stopRun, naming the task,
// 1.12) ends nothing of the batches of its reply id on any router: a
// re-sent copy of the batch running there gets the task's handle, and
// before, a cancel that reached the router late (under load) ended the
// copy's call interrupted (test/embedded TestTaskResendAfterCancel). The
// same cancel without the task ends them, as an agent's does.
func TestTaskCancelLeavesBatches(t *testing.T) {
	for _, tc := range []struct {
		task string
		want bool // the batch's calls are cancelled
	}{{"", true}, {"t1", false}} {
		rig := newWindowRig(t)
		var reached bool
		rig.cancels.running = func(session, replyID string) []*batch { reached = true; return nil }
		rig.cancels.parked = func(_ context.Context, session, replyID string, ids []string) { reached = true }
		stopped := false
		rig.cancels.confirming.add("s1", "r1", "c1", func() { stopped = true })
		e, err := bus.NewEvent(bus.TypeCallCancel, "toolbus/router/r2", bus.Cancel{Calls: []string{"c1"}, Task: tc.task})
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.ReplyID = "s1", "r1"
		m, err := e.Msg(bus.NewSubjects("").Cancel("s1"))
		if err != nil {
			t.Fatal(err)
		}
		rig.cancels.onCancel(m)
		if reached != tc.want || stopped != tc.want {
			t.Errorf("task %q: batches reached %v, confirmed call stopped %v; want %v", tc.task, reached, stopped, tc.want)
		}
	}
}

// forestallHook is a continuationPort whose Forestall calls before first.
type forestallHook struct {
	continuationPort
	before func(c bus.Call)
}

func (h forestallHook) Forestall(ctx context.Context, session, replyID string, c bus.Call, res bus.Result) error {
	h.before(c)
	return h.continuationPort.Forestall(ctx, session, replyID, c, res)
}

// eachParkingTool runs test on a new rig for each tool whose calls park
// without a worker: ext, external, and ask, which asks for a confirmation.
func eachParkingTool(t *testing.T, test func(t *testing.T, rig *windowRig, parks string)) {
	for _, name := range []string{"ext", "ask"} {
		t.Run(name, func(t *testing.T) {
			rig := newWindowRig(t)
			rig.f.resolver.known["ask"] = tool(t, bus.ToolDef{Name: "ask", Permission: bus.PermissionAsk, ConcurrencySafe: true})
			test(t, rig, name)
		})
	}
}

// TestCancelReleasesCopyAfterForestall: two copies of one batch run on one
// router (3.1), c1 (a side effect that runs alone) in both, the second copy
// waiting for the first's record as the ledger makes it; c2, an external
// tool or a confirm-policy one, is the next run. A cancel of the reply
// reaches the copies one after the other (3.5). The first copy's c1, once
// stopped, releases the second copy before the cancel reaches it, and the
// second copy's next run must find c2 ended. Before, interrupt stopped c1 before it recorded c2 interrupted
// (forestall) in P_parked, so the second copy parked c2 after the cancel (the
// failure of test/embedded TestResendThenCancelOnOneRouter under load). The
// cancel is held in that window exactly: the first copy's forestall waits,
// once c1 is stopped, for the second copy's run to end.
func TestCancelReleasesCopyAfterForestall(t *testing.T) {
	eachParkingTool(t, func(t *testing.T, rig *windowRig, parks string) {
		calls := []bus.Call{call("c1", "write"), call("c2", parks)}
		b1, b2 := rig.f.batchOf(t, "", calls...), rig.f.batchOf(t, "", calls...)
		ended1 := make(chan struct{}) // the first copy's c1 ended: its record is there
		started := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		var ctx1 context.Context
		rig.f.p.exec = ExecFunc(func(ctx context.Context, j *job) bus.Result {
			if j.b == b1 {
				ctx1 = ctx
				close(started[0])
				<-ctx.Done()
				close(ended1)
			} else {
				close(started[1])
				select { // the ledger's wait for the first copy's record
				case <-ended1:
				case <-ctx.Done():
				}
			}
			return interrupted(j.call)
		})
		done2 := make(chan struct{})
		var once sync.Once
		rig.f.p.conts = forestallHook{rig.f.p.conts, func(c bus.Call) {
			once.Do(func() {
				if ctx1.Err() == nil {
					return // c1 still runs: nothing is released yet
				}
				select {
				case <-done2:
				case <-time.After(10 * time.Second): // the second copy waits for the cancel
				}
			})
		}}
		rig.batches.track(b1)
		rig.batches.track(b2)
		done1 := make(chan struct{})
		go func() { defer close(done1); b1.run(0) }()
		<-started[0] // one copy at a time reads the (fake) session
		go func() { defer close(done2); b2.run(0) }()
		<-started[1]
		rig.cancels.onCancel(cancelMsg(t, "s1"))
		<-done1
		<-done2
		for i, b := range []*batch{b1, b2} {
			if len(b.parked) != 0 {
				t.Errorf("copy %d parked %+v after the cancel", i+1, b.parked)
			}
			if res := b.calls[1].result; res == nil || res.State != bus.StateInterrupted {
				t.Errorf("copy %d: c2's result %+v, want interrupted", i+1, res)
			}
		}
		if recs := rig.parked.Read.Parked("s1", "r1"); len(recs) != 0 {
			t.Errorf("%d calls parked after the cancel", len(recs))
		}
	})
}

// parkHook is a continuationPort whose Park calls after once it parked.
type parkHook struct {
	continuationPort
	after func()
}

func (h parkHook) Park(ctx context.Context, run parked.Run) (parked.Parking, error) {
	got, err := h.continuationPort.Park(ctx, run)
	h.after()
	return got, err
}

// TestCancelWhileCallParks: a cancel that reaches a batch while its call's
// park is in flight (after runCalls found the call without a result, before
// the park returned) ends the call's record once written, and only that
// write reports the call interrupted (3.5): the batch leaves the call to its
// record (the reply lists it parked, as it was then), and its one
// call.result is the record's (parked.ResultID). Before session 40,
// interrupt took the call for unstarted: the reply listed it both
// interrupted and parked, and the cancel ended its record only if this
// router's cache had it by then; in session 40 the batch reported it
// interrupted at once, before its record's end, which could fail
// (TestCancelEndsBeforeAnswer). The cancel is delivered in that window
// exactly: from the park, once its record is written, until it returned.
// The call is an external tool's or a confirm-policy one's.
func TestCancelWhileCallParks(t *testing.T) {
	eachParkingTool(t, func(t *testing.T, rig *windowRig, parks string) {
		b := rig.f.batchOf(t, "", call("c1", parks))
		rig.f.p.park.conts = parkHook{rig.f.p.park.conts, func() { rig.cancels.onCancel(cancelMsg(t, "s1")) }}
		rig.batches.track(b)
		b.run(0)
		rig.batches.untrack(b)
		rig.work.Wait()
		if len(b.parked) != 1 || b.parked[0].ID != "c1" || b.calls[0].result != nil {
			t.Errorf("the reply lists %+v, c1's result in the batch %+v; want c1 parked, its record's", b.parked, b.calls[0].result)
		}
		if res, ok := rig.events.result("c1"); !ok || res.State != bus.StateInterrupted {
			t.Errorf("c1's call.result %+v (published %v), want interrupted", res, ok)
		}
		if recs := rig.parked.Read.Parked("s1", "r1"); len(recs) != 0 {
			t.Errorf("%d calls still parked after the cancel", len(recs))
		}
		rig.events.mu.Lock()
		defer rig.events.mu.Unlock()
		n := 0
		for i, typ := range rig.events.types {
			if typ == "call.result:c1" {
				n++
				if id := rig.events.ids[i]; id != parked.ResultID("s1", "r1", "c1") {
					t.Errorf("c1's call.result under id %q, not its record's", id)
				}
			}
		}
		if n != 1 {
			t.Errorf("%d call.result events of c1, want 1", n)
		}
	})
}

// TestCancelWaitsOffItsSlot: a cancel that reaches a call whose park is in
// flight returns from its handler at once, and ends the call's record once
// the park returns, as tracked work. Before, the handler itself waited for
// the park, whose writes may retry through a leader election for minutes,
// holding one of the router's dispatch slots (MaxInflight) the while: one
// session's cancels of its parking batches could fill them and refuse
// every other session's calls (redteam40b).
func TestCancelWaitsOffItsSlot(t *testing.T) {
	rig := newWindowRig(t)
	b := rig.f.batchOf(t, "", call("c1", "ext"))
	release, returned := make(chan struct{}), make(chan struct{})
	rig.f.p.park.conts = parkHook{rig.f.p.park.conts, func() {
		go func() { defer close(returned); rig.cancels.onCancel(cancelMsg(t, "s1")) }()
		select {
		case <-returned:
		case <-time.After(10 * time.Second): // a bound, not a synchronisation: the handler waited for this park
			t.Error("the cancel's handler waits for the park in flight")
		}
		close(release)
	}}
	rig.batches.track(b)
	b.run(0)
	rig.batches.untrack(b)
	<-release
	rig.work.Wait()
	if res, ok := rig.events.result("c1"); !ok || res.State != bus.StateInterrupted {
		t.Errorf("c1's call.result %+v (published %v), want interrupted", res, ok)
	}
	if recs := rig.parked.Read.Parked("s1", "r1"); len(recs) != 0 {
		t.Errorf("%d calls still parked after the cancel", len(recs))
	}
}
