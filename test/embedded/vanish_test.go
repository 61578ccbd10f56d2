package embedded

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// A worker that dies mid-call (its connection closes, no leaving) is seen
// within a few heartbeats, not at the call's five-minute timeout: a
// non-idempotent call ends unknown_outcome, an idempotent one runs again
// on another worker.
func TestWorkerVanishesMidCall(t *testing.T) {
	e := newEnv(t, 1)
	started := make(chan struct{}, 4)
	var idemRuns atomic.Int32
	crashing := e.connect(t)
	e.addWorkerOn(crashing, func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "charge", MaxAttempts: 2, ConcurrencySafe: true},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				started <- struct{}{}
				<-ctx.Done() // never answers: its process is about to die
				return nil, ctx.Err()
			})
	})
	e.waitLive("charge")
	type out struct {
		reply *bus.Reply
		err   error
	}
	done := make(chan out, 1)
	go func() {
		r, err := e.client.Call(testCtx(t), "v1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "charge"}}})
		done <- out{r, err}
	}()
	<-started
	crashing.Close() // the worker's process dies: no leaving, no reply
	start := time.Now()
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	wantFailure(t, o.reply.Results[0], bus.StateError, bus.CodeUnknownOutcome, textOf(o.reply.Results[0]))
	if waited := time.Since(start); waited > 10*testHeartbeat+bound {
		t.Fatalf("took %v to notice the vanished worker", waited)
	}

	// An idempotent call: started on the dying worker, retried on one that
	// joins meanwhile.
	crashing2 := e.connect(t)
	e.addWorkerOn(crashing2, func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "lookup", Idempotent: true, MaxAttempts: 2, ConcurrencySafe: true},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				idemRuns.Add(1)
				started <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			})
	})
	go func() {
		r, err := e.client.Call(testCtx(t), "v2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "lookup"}}})
		done <- out{r, err}
	}()
	<-started
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "lookup", Idempotent: true, MaxAttempts: 2, ConcurrencySafe: true},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("found"), nil })
	})
	crashing2.Close()
	o = <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	wantSuccess(t, o.reply.Results[0], "found")
	if idemRuns.Load() != 1 {
		t.Fatalf("the dying worker ran lookup %d times", idemRuns.Load())
	}
}
