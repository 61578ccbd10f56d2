package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackSlotsHoldHeartbeats (red team, session 17): an agent re-sends
// one batch whose call is running until every one of the router's
// MaxInflight slots holds a copy (each waits for the running call's ledger
// record; nothing bounds them but the slots). Workers' registrations and
// heartbeats waited for a slot in the subscription's callback like any
// message: no worker could register, and the running worker's beats
// stopped reaching the router, which took it for vanished after its lease
// and ended its running calls unknown_outcome, every session's. Beats have
// slots of their own: a new worker registers while the slots are held, and
// the running call ends with its worker's result.
func TestAttackSlotsHoldHeartbeats(t *testing.T) {
	const slots = 8
	reg := prometheus.NewRegistry()
	e := startEnv(t, 1, false, router.Config{MaxInflight: slots, Metrics: reg})
	g := newGate(t)
	started := make(chan string, 1)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "hold_slots", TimeoutMS: 120_000}, gated(g, started))
	})
	e.waitLive("hold_slots")
	before := e.consumersOf(t, "KV_"+bus.NewSubjects("").Bucket(bus.BucketLedger))
	batches := gather(t, reg)["toolbus_router_batches_total"]

	replyID := client.NewReplyID()
	type answer struct {
		r   *bus.Reply
		err error
	}
	answers := make(chan answer, slots)
	for range slots {
		go func() {
			r, err := e.client.Call(t.Context(), "slots-a", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "hold_slots"}}}, client.WithReplyID(replyID))
			answers <- answer{r, err}
		}()
	}
	<-started
	// Every copy holds a slot (none is answered before the gate opens), and
	// the others wait on the ledger entry's watch (one, shared:
	// TestAttackCopiesWatchEach).
	ledger := "KV_" + bus.NewSubjects("").Bucket(bus.BucketLedger)
	poll, pcancel := context.WithTimeout(t.Context(), bound)
	defer pcancel()
	for n := e.consumersOf(t, ledger); n < before+1 || gather(t, reg)["toolbus_router_batches_total"] < batches+slots; n = e.consumersOf(t, ledger) {
		if bus.Sleep(poll, 20*time.Millisecond) != nil {
			t.Fatalf("after %s, %v copies of the batch taken, %d ledger watches; want %d and 1", bound, gather(t, reg)["toolbus_router_batches_total"]-batches, n-before, slots)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	if _, err := e.d.AddWorker(ctx, xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		handle(t, w, bus.ToolDef{Name: "probe_slots", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return textResult("probe"), nil
		})
		return nil
	}}); err != nil {
		t.Fatalf("a worker's registration while agents hold every slot: %v", err)
	}
	g.open()
	for range slots {
		a := <-answers
		if a.err != nil {
			t.Fatalf("a copy of the batch: %v", a.err)
		}
		if got := a.r.Results[0]; got.State != bus.StateSuccess || textOf(got) != "done c1" {
			t.Fatalf("the running call while agents held every slot: want its worker's result, got %s %q", got.State, textOf(got))
		}
	}
}

// consumersOf counts the consumers on stream.
func (e *env) consumersOf(t *testing.T, stream string) int {
	t.Helper()
	js := testkit.JetStream(t, e.nc)
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// TestAttackCopiesWatchEach (red team, session 17): each copy of a re-sent
// batch waited for each of its running calls with a KV watch of its own,
// one JetStream consumer per (copy, call): one agent's copies of one batch
// of 64 concurrency-safe calls made the router create up to 64 ×
// MaxInflight (262,144 by default) consumers on the ledger's stream at
// once, each created and deleted through the meta leader on a cluster (8
// copies of 16 calls: 112). The duplicates of one key on a router share
// one wait (ledger.wait): one watch per running call, however many copies.
// The server counts: the consumers on the ledger's stream while the copies
// wait, and every consumer created on it (its advisories) until all are
// answered.
func TestAttackCopiesWatchEach(t *testing.T) {
	const slots, calls = 8, 16
	reg := prometheus.NewRegistry()
	e := startEnv(t, 1, false, router.Config{MaxInflight: slots, Metrics: reg})
	g := newGate(t)
	started := make(chan string, calls)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "hold_each", ConcurrencySafe: true, TimeoutMS: 120_000}, gated(g, started))
	})
	e.waitLive("hold_each")
	ledger := "KV_" + bus.NewSubjects("").Bucket(bus.BucketLedger)
	created := make(chan struct{}, 1024)
	sub, err := e.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED."+ledger+".>", func(*nats.Msg) { created <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	before := e.consumersOf(t, ledger)
	batches := gather(t, reg)["toolbus_router_batches_total"]
	batch := bus.Batch{}
	for i := range calls {
		batch.Calls = append(batch.Calls, bus.Call{ID: fmt.Sprintf("c%d", i), Name: "hold_each"})
	}
	replyID := client.NewReplyID()
	done := make(chan error, slots)
	for range slots {
		go func() {
			_, err := e.client.Call(t.Context(), "copies-a", batch, client.WithReplyID(replyID))
			done <- err
		}()
	}
	for range calls {
		<-started
	}
	// Every copy holds a slot (none is answered before the gate opens), and
	// every running call has a waiting duplicate's watch; on main the
	// copies' watches go on to 112.
	poll, pcancel := context.WithTimeout(t.Context(), bound)
	defer pcancel()
	peak := 0
	for {
		n := e.consumersOf(t, ledger) - before
		peak = max(peak, n)
		taken := gather(t, reg)["toolbus_router_batches_total"] - batches
		if taken >= slots && n >= calls {
			break
		}
		if bus.Sleep(poll, 20*time.Millisecond) != nil {
			t.Fatalf("after %s: %d consumers on %s, %v copies taken; want %d and %d", bound, n, ledger, taken, calls, slots)
		}
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The consumers created while every call ran. A copy whose claim read
	// the entry before its record and that comes to wait after the shared
	// wait ended opens a watch of its own (it finds the record at once):
	// those are not counted.
	running := len(created)
	g.open()
	for range slots {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if peak > calls {
		t.Errorf("%d copies of one batch of %d running calls held %d consumers on %s; want at most one per call", slots, calls, peak, ledger)
	}
	if running > calls {
		t.Errorf("%d copies of one batch of %d running calls created %d consumers on %s; want at most one per call", slots, calls, running, ledger)
	}
	t.Logf("peak %d consumers, %d created while the calls ran, %d in all, for %d copies of %d calls", peak, running, len(created), slots, calls)
}
