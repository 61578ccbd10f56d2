package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// TestCancelledResetStaysCancelled: a batch's reset_tools that a cancel
// ends before it ran is forestalled like a worker's call (1.32): a re-sent
// copy of the batch gets it interrupted and the session's groups stay as
// they were, as the agent was told. Before, the copy ran reset_tools again
// and switched the groups on (docs/router.md, "Built-ins ... are not
// forestalled").
func TestCancelledResetStaysCancelled(t *testing.T) {
	e := newEnv(t, 2) // the copy may run on the other router
	if err := e.client.Admin(t.Context(), "groups.put", "", bus.Group{Name: "ops", Description: "Deploy.", Scope: bus.ScopeMeta}, nil); err != nil {
		t.Fatal(err)
	}
	var sig signals
	e.addWorker(func(w *worker.Worker) {
		// hold runs alone and blocks until the test releases it.
		handle(t, w, bus.ToolDef{Name: "hold"}, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			sig.fire(c.ID + "/started")
			if !sig.wait(ctx, "release") {
				return nil, errors.New("context ended or never released")
			}
			return textResult("released"), nil
		})
	})
	e.waitLive("hold")
	e.waitGroups("ops")
	const session = "cancel42-reset"
	replyID := client.NewReplyID()
	b := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "hold", Input: json.RawMessage(`{}`)},
		{ID: "c2", Name: "reset_tools", Input: json.RawMessage(`{"ops": true}`)}}}
	type out struct {
		reply *bus.Reply
		err   error
	}
	ev := e.watch(t, session)
	done := make(chan out, 1)
	go func() {
		r, err := e.client.Call(testCtx(t), session, b, client.WithReplyID(replyID))
		done <- out{r, err}
	}()
	waitClosed(t, sig.ch("c1/started"), "c1 to start")
	if err := e.client.Cancel(t.Context(), session, replyID, "c2"); err != nil {
		t.Fatal(err)
	}
	// c2's result is out once the cancel has recorded it (forestall
	// first): c1 may finish then.
	collect(t, ev, func(e *bus.Event) bool { return e.Type == bus.TypeCallResult && e.ToolCallID == "c2" })
	sig.fire("release")
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	wantInterrupted := func(what string, reply *bus.Reply) {
		t.Helper()
		if got := reply.Results[0]; got.State != bus.StateSuccess {
			t.Errorf("%s: c1 %+v, want success", what, got)
		}
		wantFailure(t, reply.Results[1], bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
		sess, err := e.sessionStore(t).Load(t.Context(), session)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(sess.Active, "ops") {
			t.Errorf("%s: the session's groups %v: the cancelled reset_tools ran", what, sess.Active)
		}
	}
	wantInterrupted("the batch", o.reply)
	// The copy, re-sent as after a lost reply: c1 from the ledger, c2
	// interrupted, not run.
	again, err := e.client.Call(testCtx(t), session, b, client.WithReplyID(replyID))
	if err != nil {
		t.Fatal(err)
	}
	wantInterrupted("the re-sent copy", again)
}
