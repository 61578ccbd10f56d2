package embedded

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// Found by toolbus soak (a router SIGKILLed while a batch was parked): a
// confirmation accepted by a router that dies before the confirmed call
// reports leaves the call's parked record "answered" for ever. The router
// that takes the continuation over keeps waiting for an answer that has
// already been given, so the batch never completes: re-sends get it
// parked, and no batch.done comes. Protocol 6.1: another router takes over
// a continuation whose lease is stale "and re-runs the calls that never
// reported"; the confirmed call never reported.
func TestConfirmedCallOfADeadRouterCompletes(t *testing.T) {
	e := newEnv(t, 1)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "charge_confirmed", Permission: bus.PermissionAsk, TimeoutMS: 2000},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				runs.Add(1)
				started <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
				return textResult("charged " + c.ID), nil
			})
	})
	e.waitLive("charge_confirmed")
	calls := []bus.Call{{ID: "c1", Name: "charge_confirmed"}}
	r, err := e.client.Call(testCtx(t), "s1", bus.Batch{Calls: calls}, client.WithReplyID("t1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Parked) != 1 || r.Parked[0].Kind != bus.KindConfirm {
		t.Fatalf("want c1 parked for a confirmation, got %s", jsonOf(r))
	}
	yes := true
	if err := e.client.Parked().Answer(testCtx(t), "charge_confirmed", "s1", "t1", "c1", bus.Answer{Confirmed: &yes}); err != nil {
		t.Fatal(err)
	}
	// The only router accepted the answer and runs the call; it dies
	// without a word while the call runs, and another router starts.
	testkit.Recv(t, started, bound, "the confirmed call to start")
	e.rconns[0].Close()
	e.addRouter()
	close(release) // the worker's result goes to the dead router's inbox
	// An agent re-sends the batch until it completes: the call's result,
	// or unknown_outcome (its result was lost with the router).
	var final *bus.Result
	testkit.CheckFor(t, 6*bound, 500*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		r, err := e.client.Call(ctx, "s1", bus.Batch{Calls: calls}, client.WithReplyID("t1"))
		if err != nil {
			return err
		}
		if len(r.Results) == 1 {
			final = &r.Results[0]
			return nil
		}
		return errors.New("still parked: " + jsonOf(r))
	})
	if final.State != bus.StateSuccess && (final.Error == nil || final.Error.Code != bus.CodeUnknownOutcome) {
		t.Errorf("c1: %s", jsonOf(final))
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the confirmed call ran %d times", n)
	}
}
