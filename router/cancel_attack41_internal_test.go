package router

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/registry"
)

// countedEvents counts the call.result events of each call id.
type countedEvents struct {
	*resultEvents
	mu sync.Mutex
	n  map[string]int
}

func (c *countedEvents) publish(id, typ, session, replyID, callID string, trace [2]string, data any) (*sentEvent, error) {
	if typ == bus.TypeCallResult {
		c.mu.Lock()
		c.n[callID]++
		c.mu.Unlock()
	}
	return c.resultEvents.publish(id, typ, session, replyID, callID, trace, data)
}

func (c *countedEvents) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// agentCancel is an agent's io.toolbus.call.cancel of session's reply,
// naming calls, on its own session's subject.
func agentCancel(t *testing.T, session, replyID string, calls ...string) *nats.Msg {
	t.Helper()
	e, err := bus.NewEvent(bus.TypeCallCancel, "test/agent", bus.Cancel{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID, e.ReplyID = session, replyID
	m, err := e.Msg(bus.NewSubjects("").Cancel(session))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *cancelEnds) size() (batches, ids int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.m {
		ids += len(c.ids)
	}
	return len(e.m), ids
}

// TestAttack41CancelFlood (redteam41): an agent's cancels, however many,
// hold at most one writer and one cancelEnds entry per batch that parked
// here, of at most bus.MaxCancelCalls ids, while the store refuses the
// writes: cancels of made-up replies hold nothing, repeated cancels of its
// parked batch (each naming 1,024 made-up calls of maximal length) are
// taken by the one writer, a cancel by another session refuses none of
// this session's answers, and the parked call is told exactly one outcome
// (interrupted), an approver's allow refused not_parked before and after.
func TestAttack41CancelFlood(t *testing.T) {
	rig := newWindowRig(t)
	ce := &countedEvents{resultEvents: rig.events, n: map[string]int{}}
	rig.f.p.report.events, rig.answers.events = ce, ce
	ext := bus.ToolDef{Name: "ext", External: true, ConcurrencySafe: true}
	rig.answers.reg = &fakeTools{tools: map[string]*registry.Tool{"ext": tool(t, ext)}}
	rig.answers.groups = fakeRules{}
	gate, writing := make(chan struct{}), make(chan struct{}, 1)
	var writes, inFlight, most atomic.Int32
	record := rig.cancels.parked
	rig.cancels.parked = func(ctx context.Context, session, replyID string, ids []string) {
		writes.Add(1)
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case writing <- struct{}{}:
		default:
		}
		<-gate // the store's outage: the write retries until it ends
		record(ctx, session, replyID, ids)
		inFlight.Add(-1)
	}
	b := rig.f.batchOf(t, "", call("c1", "ext"))
	rig.batches.track(b)
	b.run(0)
	rig.batches.untrack(b)
	if len(rig.parked.Read.Parked("s1", "r1")) != 1 {
		t.Fatal("c1 did not park")
	}
	before := runtime.NumGoroutine()

	// Cancels of replies this router never saw: nothing held, nothing written.
	for i := range 2000 {
		rig.cancels.onCancel(agentCancel(t, "s1", fmt.Sprintf("made-up-%d", i)))
	}
	if n, _ := rig.cancels.ends.size(); n != 0 || writes.Load() != 0 {
		t.Fatalf("cancels of made-up replies left %d entries and %d writes", n, writes.Load())
	}
	// Another session's cancel of the same reply id names none of s1's calls.
	rig.cancels.onCancel(agentCancel(t, "s2", "r1"))
	if rig.cancels.ends.names("s1", "r1", "c1") {
		t.Fatal("session s2's cancel marks s1's call as being cancelled")
	}

	// Repeated cancels of the parked batch while its write retries.
	long := strings.Repeat("x", 120)
	for i := range 300 {
		ids := make([]string, bus.MaxCancelCalls)
		for j := range ids {
			ids[j] = fmt.Sprintf("%s-%d-%d", long, i, j)
		}
		if i%2 == 0 {
			ids[0] = "c1"
		}
		rig.cancels.onCancel(agentCancel(t, "s1", "r1", ids...))
	}
	<-writing
	if n, ids := rig.cancels.ends.size(); n != 1 || ids > bus.MaxCancelCalls {
		t.Errorf("the flood holds %d entries of %d ids; want 1 of at most %d", n, ids, bus.MaxCancelCalls)
	}
	if w := writes.Load(); w != 1 {
		t.Errorf("%d writes in flight for one batch, want 1", w)
	}
	if g := runtime.NumGoroutine() - before; g > 5 {
		t.Errorf("the flood holds %d more goroutines", g)
	}
	if err := rig.approve(t, "ext", "c1"); !errors.Is(err, bus.ErrNotParked) {
		t.Errorf("an answer while the cancel is pending got %v, want not_parked", err)
	}
	close(gate)
	rig.work.Wait()
	if w, m := writes.Load(), most.Load(); w > 2 || m > 1 {
		t.Errorf("the flood cost %d writes, %d at once; want at most 2, one at a time", w, m)
	}
	if n, _ := rig.cancels.ends.size(); n != 0 {
		t.Errorf("%d cancelEnds entries left once written", n)
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if ce.count("c1") == 0 {
			return errors.New("no call.result for c1")
		}
		return nil
	})
	if err := rig.approve(t, "ext", "c1"); !errors.Is(err, bus.ErrNotParked) {
		t.Errorf("an answer after the cancel got %v, want not_parked", err)
	}
	if res, _ := rig.events.result("c1"); res.State != bus.StateInterrupted || ce.count("c1") != 1 {
		t.Errorf("c1: %d call.results, last %s; want one, interrupted", ce.count("c1"), res.State)
	}
}

// failedPark is a store whose park fails (its outage outlasts the park's
// budget) once during ran: what a cancel that comes in the window meets.
type failedPark struct {
	continuationPort
	during func()
}

func (h failedPark) Park(context.Context, parked.Run) (parked.Parking, error) {
	h.during()
	return parked.Parking{}, errors.New("store down")
}

// TestAttack41CancelOfFailedPark (redteam41): a cancel of a call whose park
// is in flight leaves it to its record; when the park then fails, nothing
// was recorded, and the call is told one outcome, the park's error: the
// batch finishes, and no cancel is left pending to refuse answers.
func TestAttack41CancelOfFailedPark(t *testing.T) {
	rig := newWindowRig(t)
	ce := &countedEvents{resultEvents: rig.events, n: map[string]int{}}
	rig.f.p.report.events, rig.answers.events = ce, ce
	rig.f.p.park.conts = failedPark{rig.f.p.park.conts, func() { rig.cancels.onCancel(cancelMsg(t, "s1")) }}
	b := rig.f.batchOf(t, bus.EventsCalls, call("c1", "ext")) // every result its own event: counted
	rig.batches.track(b)
	if !b.run(0) {
		t.Fatal("the batch whose park failed did not finish its run")
	}
	rig.batches.untrack(b)
	rig.work.Wait()
	if n := ce.count("c1"); n != 1 {
		t.Errorf("c1 told %d call.results, want 1", n)
	}
	if res, _ := rig.events.result("c1"); res.State != bus.StateError {
		t.Errorf("c1 ended %s, want error (its park failed)", res.State)
	}
	if n, _ := rig.cancels.ends.size(); n != 0 {
		t.Errorf("%d cancels left pending", n)
	}
}

// TestAttack41CancelOneAnswerOther (redteam41): a pending cancel of one
// call (its write retrying) refuses answers to that call only: the other
// parked call of the batch is answered and runs, each call told one
// outcome.
func TestAttack41CancelOneAnswerOther(t *testing.T) {
	rig := newWindowRig(t)
	ce := &countedEvents{resultEvents: rig.events, n: map[string]int{}}
	rig.f.p.report.events, rig.answers.events = ce, ce
	def := bus.ToolDef{Name: "ask", Permission: bus.PermissionAsk, ConcurrencySafe: true}
	rig.f.resolver.known["ask"] = tool(t, def)
	rig.answers.reg = &fakeTools{tools: map[string]*registry.Tool{"ask": tool(t, def)}}
	rig.answers.groups = fakeRules{}
	var ran sync.Map
	rig.answers.runTool = func(_ context.Context, j *job) bus.Result {
		ran.Store(j.call.ID, true)
		return bus.Result{ID: j.call.ID, Name: "ask", State: bus.StateSuccess, Output: bus.Text("ran")}
	}
	gate, writing := make(chan struct{}), make(chan struct{})
	record := rig.cancels.parked
	rig.cancels.parked = func(ctx context.Context, session, replyID string, ids []string) {
		close(writing)
		<-gate
		record(ctx, session, replyID, ids)
	}
	rig.f.p.park.conts = parkHook{rig.f.p.park.conts, func() { rig.cancels.onCancel(cancelMsg(t, "s1", "c1")) }}
	b := rig.f.batchOf(t, bus.EventsCalls, call("c1", "ask"), call("c2", "ask"))
	rig.batches.track(b)
	b.run(0)
	rig.batches.untrack(b)
	<-writing
	if err := rig.approve(t, "ask", "c1"); !errors.Is(err, bus.ErrNotParked) {
		t.Errorf("the allow of the cancelled c1 got %v, want not_parked", err)
	}
	if err := rig.approve(t, "ask", "c2"); err != nil {
		t.Errorf("the allow of c2, which no cancel names, got %v", err)
	}
	close(gate)
	rig.work.Wait()
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if ce.count("c1") == 0 || ce.count("c2") == 0 {
			return errors.New("a call.result missing")
		}
		return nil
	})
	for id, want := range map[string]string{"c1": bus.StateInterrupted, "c2": bus.StateSuccess} {
		if res, _ := rig.events.result(id); res.State != want || ce.count(id) != 1 {
			t.Errorf("%s: %d call.results, last %s; want one, %s", id, ce.count(id), res.State, want)
		}
	}
	if _, ok := ran.Load("c1"); ok {
		t.Error("the cancelled c1 ran")
	}
}
