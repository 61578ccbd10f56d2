package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
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
	e := startEnv(t, 1, false, router.Config{MaxInflight: slots})
	g := newGate(t)
	started := make(chan string, 1)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "hold_slots", TimeoutMS: 120_000}, gated(g, started))
	})
	e.waitLive("hold_slots")
	before := e.consumersOf(t, "KV_"+bus.NewSubjects("").Bucket(bus.BucketLedger))

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
	// Every other copy waits on the ledger entry's watch, one consumer each:
	// then every slot is held.
	ledger := "KV_" + bus.NewSubjects("").Bucket(bus.BucketLedger)
	poll, pcancel := context.WithTimeout(t.Context(), bound)
	defer pcancel()
	for n := e.consumersOf(t, ledger); n < before+slots-1; n = e.consumersOf(t, ledger) {
		if bus.Sleep(poll, 20*time.Millisecond) != nil {
			t.Fatalf("after %s, %d copies of the batch wait for its running call; want %d", bound, n-before, slots-1)
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
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
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
// batch waits for each of its running calls with a KV watch of its own,
// one JetStream consumer per (copy, call): one agent's copies of one batch
// of 64 concurrency-safe calls make the router create up to 64 ×
// MaxInflight (262,144 by default) consumers on the ledger's stream at
// once, each created and deleted through the meta leader on a cluster.
// Fix (not small, ledger.wait): the duplicates of one key on a router
// share one watch (and one poll), each keeping its own expiry and
// context; a takeover stays one compare-and-set, its result handed to
// every waiter of the key.
func TestAttackCopiesWatchEach(t *testing.T) {
	t.Skip("redteam: every copy of a re-sent batch opens a ledger watch per running call, consumers = copies × calls, bounded only by MaxInflight × 64 (fails on main)")
	const slots, calls = 8, 16
	e := startEnv(t, 1, false, router.Config{MaxInflight: slots})
	g := newGate(t)
	started := make(chan string, calls)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "hold_each", ConcurrencySafe: true, TimeoutMS: 120_000}, gated(g, started))
	})
	e.waitLive("hold_each")
	ledger := "KV_" + bus.NewSubjects("").Bucket(bus.BucketLedger)
	before := e.consumersOf(t, ledger)
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
	poll, pcancel := context.WithTimeout(t.Context(), bound)
	defer pcancel()
	n := e.consumersOf(t, ledger)
	for ; n < before+(slots-1)*calls; n = e.consumersOf(t, ledger) {
		if bus.Sleep(poll, 20*time.Millisecond) != nil {
			break
		}
	}
	g.open()
	for range slots {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n-before > calls {
		t.Fatalf("%d copies of one batch of %d running calls held %d consumers on %s; want at most one per call", slots, calls, n-before, ledger)
	}
}
