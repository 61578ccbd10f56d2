package embedded

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// TestFailureIsolation: a failing call never cancels or discards its
// siblings. The sibling keeps running until the router has published both
// failures, then checks that its context is still alive.
func TestFailureIsolation(t *testing.T) {
	e := newEnv(t, 1)
	var sig signals
	var afterRan recorder
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "fail_go", ConcurrencySafe: true},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				return nil, errors.New("boom: disk on fire")
			})
		handle(t, w, bus.ToolDef{Name: "fail_result", ConcurrencySafe: true},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				return &bus.ExecResult{State: bus.StateError, Output: bus.Text("disk full")}, nil
			})
		handle(t, w, bus.ToolDef{Name: "sibling", ConcurrencySafe: true},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				if !sig.wait(ctx, c.SessionID+"/failures-reported") {
					return nil, errors.New("the failures were never reported, or my context ended: " + context.Cause(ctx).Error())
				}
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return textResult("still here"), nil
			})
		handle(t, w, bus.ToolDef{Name: "after", ConcurrencySafe: false},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				afterRan.record(c)
				return textResult("after ran"), nil
			})
	})
	e.waitLive("fail_go", "fail_result", "sibling", "after")

	const session = "isolation"
	ev := e.watch(t, session)
	replyID := client.NewReplyID()
	calls := []bus.Call{
		{ID: "c_sib1", Name: "sibling"},
		{ID: "c_go", Name: "fail_go"},
		{ID: "c_res", Name: "fail_result"},
		{ID: "c_sib2", Name: "sibling"},
		{ID: "c_after", Name: "after"},
	}
	type out struct {
		reply *bus.Reply
		err   error
	}
	done := make(chan out, 1)
	ctx := testCtx(t)
	go func() {
		r, err := e.client.Call(ctx, session, bus.Batch{Calls: calls, Events: bus.EventsCalls}, client.WithReplyID(replyID))
		done <- out{r, err}
	}()
	// Both failures are finished on the router while the siblings run.
	failed := map[string]bool{}
	collect(t, ev, func(ev *bus.Event) bool {
		if ev.Type == bus.TypeCallResult && (ev.ToolCallID == "c_go" || ev.ToolCallID == "c_res") {
			failed[ev.ToolCallID] = true
		}
		return len(failed) == 2
	})
	sig.fire(session + "/failures-reported")
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	checkCallOrder(t, calls, o.reply.Results)
	res := o.reply.Results
	wantSuccess(t, res[0], "still here")
	wantFailure(t, res[1], bus.StateError, bus.CodeToolError, "")
	if got := textOf(res[1]); !strings.Contains(got, "boom: disk on fire") {
		t.Errorf("text of a tool's Go error is %q, want the error's text kept", got)
	}
	wantFailure(t, res[2], bus.StateError, bus.CodeToolError, "disk full")
	wantSuccess(t, res[3], "still here")
	wantSuccess(t, res[4], "after ran")
	if _, ok := afterRan.get(session, "c_after"); !ok {
		t.Fatal("the call after the failures never reached the worker")
	}
}
