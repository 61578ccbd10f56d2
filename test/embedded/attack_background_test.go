package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackBackgroundLiftsTimeout (the red team's residual risk, session
// 17): an agent asks "background": true (protocol 3.1) of a tool that
// never declared it, and the router sends the exec with the task's
// deadline (MaxRun, an hour) instead of the tool's timeout: the agent, not
// the tool's author, chose how long the tool runs. A tool that says
// no_background (7.2, 1.12) keeps its timeout: the ask is ignored, the
// worker is given the tool's own deadline, the call ends timeout and no
// task is stored. A tool that does not say it still honours the ask.
func TestAttackBackgroundLiftsTimeout(t *testing.T) {
	e := newEnv(t, 1)
	g := newGate(t)
	deadlines := make(chan time.Duration, 2)
	held := func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
		d, _ := ctx.Deadline()
		deadlines <- time.Until(d)
		select {
		case <-g.ch:
			return textResult("done " + c.ID), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "keeps_timeout", ReadOnly: true, TimeoutMS: 300, NoBackground: true}, held)
		handle(t, w, bus.ToolDef{Name: "lends_timeout", ReadOnly: true, TimeoutMS: 300}, held)
	})
	e.waitLive("keeps_timeout", "lends_timeout")
	const session = "bg-ask"

	r := e.call(t, session, []bus.Call{{ID: "k", Name: "keeps_timeout", Background: true}}).Results[0]
	if left := <-deadlines; left > 5*time.Second {
		t.Fatalf("a no_background tool asked to go background: its worker was given %s, not its timeout of 300ms", left)
	}
	if r.State != bus.StateError || r.Error == nil || r.Error.Code != bus.CodeTimeout || r.Task != nil {
		t.Fatalf("a no_background tool asked to go background: want its timeout, got %s %+v %q", r.State, r.Error, textOf(r))
	}

	// The control: a tool that does not refuse it lends the ask its run.
	id := backgrounded(t, e.call(t, session, []bus.Call{{ID: "l", Name: "lends_timeout", Background: true}}).Results[0])
	if left := <-deadlines; left < 30*time.Minute {
		t.Fatalf("a tool asked to go background: its worker was given %s, want the task's deadline", left)
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	list, err := e.client.Tasks().List(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != id {
		t.Fatalf("the session's tasks: %+v; want only the one of lends_timeout", list)
	}
}
