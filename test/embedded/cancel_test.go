package embedded

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// TestCancel: io.toolbus.call.cancel interrupts the running calls it names
// (all of the reply id's when it names none): the result is interrupted
// with the fixed text and the worker sees its context cancelled. A cancel
// for an unknown reply id changes nothing.
func TestCancel(t *testing.T) {
	e := newEnv(t, 2) // the cancel reaches every router, whichever runs the batch
	var sig signals
	ctxErrs := make(chan error, 16) // what hang saw when its context ended
	e.addWorker(func(w *worker.Worker) {
		// hang blocks until its context is cancelled.
		hang := func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			sig.fire(c.SessionID + "/" + c.ID + "/started")
			select {
			case <-ctx.Done():
				ctxErrs <- ctx.Err()
				sig.fire(c.SessionID + "/" + c.ID + "/cancelled")
				return nil, ctx.Err()
			case <-time.After(bound):
				ctxErrs <- errors.New("never cancelled")
				return textResult("never cancelled"), nil
			}
		}
		handle(t, w, bus.ToolDef{Name: "hang", ConcurrencySafe: true}, hang)
		handle(t, w, bus.ToolDef{Name: "hang_unsafe", ConcurrencySafe: false}, hang)
		// hold blocks until the test releases it, and fails if its
		// context ends first.
		handle(t, w, bus.ToolDef{Name: "hold", ConcurrencySafe: true},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				sig.fire(c.SessionID + "/" + c.ID + "/started")
				if !sig.wait(ctx, c.SessionID+"/release") {
					return nil, errors.New("context ended or never released")
				}
				return textResult("released"), nil
			})
	})
	e.waitLive("hang", "hang_unsafe", "hold")

	type out struct {
		reply *bus.Reply
		err   error
	}
	// start sends a batch in the background and waits until the calls
	// named by started (all when none) have started on the worker.
	start := func(t *testing.T, session, replyID string, calls []bus.Call, started ...string) <-chan out {
		t.Helper()
		done := make(chan out, 1)
		ctx := testCtx(t)
		go func() {
			r, err := e.client.Call(ctx, session, bus.Batch{Calls: calls}, client.WithReplyID(replyID))
			done <- out{r, err}
		}()
		if len(started) == 0 {
			for _, c := range calls {
				started = append(started, c.ID)
			}
		}
		for _, id := range started {
			waitClosed(t, sig.ch(session+"/"+id+"/started"), id+" to start")
		}
		return done
	}
	wait := func(t *testing.T, done <-chan out, calls []bus.Call) *bus.Reply {
		t.Helper()
		select {
		case o := <-done:
			if o.err != nil {
				t.Fatal(o.err)
			}
			checkCallOrder(t, calls, o.reply.Results)
			return o.reply
		case <-time.After(bound):
			t.Fatal("no reply")
			return nil
		}
	}
	wantCtxCancelled := func(t *testing.T) {
		t.Helper()
		select {
		case err := <-ctxErrs:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the worker's context ended with %v, want context.Canceled", err)
			}
		case <-time.After(bound):
			t.Fatal("the worker's context was never cancelled")
		}
	}

	t.Run("whole batch", func(t *testing.T) {
		const session = "cancel-1"
		ev := e.watch(t, session)
		replyID := client.NewReplyID()
		calls := []bus.Call{{ID: "c1", Name: "hang"}, {ID: "c2", Name: "hang"}}
		done := start(t, session, replyID, calls)
		if err := e.client.Cancel(t.Context(), session, replyID); err != nil {
			t.Fatal(err)
		}
		reply := wait(t, done, calls)
		for _, r := range reply.Results {
			wantFailure(t, r, bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
		}
		wantCtxCancelled(t)
		wantCtxCancelled(t)
		events := collect(t, ev, batchDone(replyID))
		t.Run("call.result events before batch.done", func(t *testing.T) {
			// Read on until every call has its call.result, to tell a
			// late event from a missing one.
			seen := map[string]bool{}
			for _, x := range events {
				if x.Type == bus.TypeCallResult {
					seen[x.ToolCallID] = true
				}
			}
			before := len(seen)
			if before < len(calls) {
				collect(t, ev, func(x *bus.Event) bool {
					if x.Type == bus.TypeCallResult && x.ReplyID == replyID {
						seen[x.ToolCallID] = true
					}
					return len(seen) == len(calls)
				})
				t.Fatalf("%d of %d call.result events of a cancelled batch came after its batch.done", len(calls)-before, len(calls))
			}
			checkBatchEvents(t, events, session, replyID, calls, reply.Results, "c1", "c2") // cancelled: docs/protocol.md 3.4
		})
	})

	t.Run("named calls only", func(t *testing.T) {
		const session = "cancel-2"
		replyID := client.NewReplyID()
		calls := []bus.Call{{ID: "c1", Name: "hang"}, {ID: "c2", Name: "hold"}}
		done := start(t, session, replyID, calls)
		// A cancel for another reply id of the session is a no-op ...
		if err := e.client.Cancel(t.Context(), session, "no-such-reply"); err != nil {
			t.Fatal(err)
		}
		// ... and so is one for the same reply id in another session.
		if err := e.client.Cancel(t.Context(), "cancel-other", replyID); err != nil {
			t.Fatal(err)
		}
		if err := e.client.Cancel(t.Context(), session, replyID, "c1"); err != nil {
			t.Fatal(err)
		}
		// The worker handles cancels in order: once c1 is cancelled, the
		// no-ops have been seen too.
		waitClosed(t, sig.ch(session+"/c1/cancelled"), "c1 to be cancelled")
		wantCtxCancelled(t)
		sig.fire(session + "/release")
		reply := wait(t, done, calls)
		wantFailure(t, reply.Results[0], bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
		wantSuccess(t, reply.Results[1], "released")
	})

	t.Run("later runs never start", func(t *testing.T) {
		const session = "cancel-4"
		defer sig.fire(session + "/release") // frees a hold that should never have started
		replyID := client.NewReplyID()
		// hang_unsafe runs alone; the calls after it wait for their run.
		calls := []bus.Call{{ID: "c1", Name: "hang_unsafe"}, {ID: "c2", Name: "hold"}, {ID: "c3", Name: "hang_unsafe"}}
		done := start(t, session, replyID, calls, "c1")
		if err := e.client.Cancel(t.Context(), session, replyID); err != nil {
			t.Fatal(err)
		}
		wantCtxCancelled(t)
		late := func() (ids []string) {
			for _, id := range []string{"c2", "c3"} {
				select {
				case <-sig.ch(session + "/" + id + "/started"):
					ids = append(ids, id)
				default:
				}
			}
			return ids
		}
		// The cancel may reach the worker before the router: the router may
		// then start a later run, but the worker remembers the cancel and
		// never starts those calls.
		const bug = "a call of a later run started on the worker after the whole batch was cancelled (%s)"
		var reply *bus.Reply
		select {
		case o := <-done:
			if o.err != nil {
				t.Fatal(o.err)
			}
			reply = o.reply
		case <-time.After(bound):
			if ids := late(); len(ids) > 0 {
				t.Fatalf(bug, fmt.Sprintf("%v ran on and the batch got no reply until it ended", ids))
			}
			t.Fatal("no reply")
		}
		checkCallOrder(t, calls, reply.Results)
		for _, r := range reply.Results {
			wantFailure(t, r, bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
		}
		if ids := late(); len(ids) > 0 {
			t.Fatalf(bug, fmt.Sprintf("%v ran on while reported interrupted", ids))
		}
	})

	t.Run("after the batch finished", func(t *testing.T) {
		const session = "cancel-3"
		replyID := client.NewReplyID()
		calls := []bus.Call{{ID: "c1", Name: "hold"}}
		sig.fire(session + "/release")
		reply := wait(t, start(t, session, replyID, calls), calls)
		wantSuccess(t, reply.Results[0], "released")
		if err := e.client.Cancel(t.Context(), session, replyID); err != nil {
			t.Fatal(err)
		}
		// The routers still serve the session.
		wantSuccess(t, e.call(t, session, calls).Results[0], "released")
	})
}
