package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// The races of two copies of one batch (docs/protocol.md 3.1: the agent
// re-sends a batch whose reply did not come within 5 s, so the first copy
// may still be running when the second arrives).

// sent is the outcome of a batch sent in the background.
type sent struct {
	reply *bus.Reply
	err   error
}

// sendAsync sends b as session's batch replyID in the background.
func (e *env) sendAsync(t *testing.T, session, replyID string, calls []bus.Call) <-chan sent {
	t.Helper()
	ch := make(chan sent, 1)
	ctx := testCtx(t)
	go func() {
		r, err := e.client.Call(ctx, session, bus.Batch{Calls: calls}, client.WithReplyID(replyID))
		ch <- sent{r, err}
	}()
	return ch
}

// replyOf waits for the reply of a batch sent with sendAsync.
func replyOf(t *testing.T, ch <-chan sent, what string) *bus.Reply {
	t.Helper()
	select {
	case s := <-ch:
		if s.err != nil {
			t.Fatalf("%s: %v", what, s.err)
		}
		return s.reply
	case <-time.After(bound):
		t.Fatalf("%s: no reply", what)
	}
	return nil
}

// TestResendWhileFirstRunParks: a copy of a batch that arrives while the
// first copy's run has parked a call and still runs another finds the
// first copy's continuation and adopts it; its reply must still hold every
// call of the run, finished or parked (3.2), not leave out the one the
// first copy is running (it ran nowhere as far as that reply said). The
// side-effecting call runs once (3.1).
func TestResendWhileFirstRunParks(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	var sig signals
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_side", ConcurrencySafe: true}, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			sig.fire("started")
			if !sig.wait(ctx, "release") {
				return nil, fmt.Errorf("never released")
			}
			return textResult("side done"), nil
		})
	})
	e.waitLive("slow_side")
	calls := []bus.Call{{ID: "c1", Name: "ext"}, {ID: "c2", Name: "slow_side"}}
	first := e.sendAsync(t, "s1", "r1", calls)
	// The run parked c1 (its continuation and record are written before
	// the other calls of the run start) and now runs c2.
	waitClosed(t, sig.ch("started"), "the first copy's c2 to start")
	again := e.sendAsync(t, "s1", "r1", calls)
	e.waitForLedgerWatcher(t) // the re-sent copy waits for c2's record
	sig.fire("release")
	for _, r := range []*bus.Reply{replyOf(t, first, "first copy"), replyOf(t, again, "re-sent copy")} {
		if len(r.Results) != 1 || r.Results[0].ID != "c2" || len(r.Parked) != 1 || r.Parked[0].ID != "c1" {
			t.Fatalf("a reply must hold c2's result and c1 parked: %s", jsonOf(r))
		}
		wantSuccess(t, r.Results[0], "side done")
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("slow_side ran %d times, want 1", n)
	}
}

// TestResendThenCancelOnOneRouter: two copies of one batch on the same
// router (one router, as on a laptop) are both reached by a cancel of the
// reply id: calls that have not started never start (3.5), in either copy.
// Before, the router knew only the copy that arrived last, and the first
// copy went on with its later runs after the cancel: its external call
// parked, so its reply listed the call as parked while the other copy's
// said interrupted, and the record waited for an answer that the batch's
// batch.done (already sent, by the other copy) no longer expected. (A
// worker's call of the later run would be refused by the worker itself,
// which remembers the cancel; a call that parks has no worker.) Then, under
// load: the cancel stopped the first copy's c1 before it recorded c2
// interrupted, and c1's end released the copy waiting for it in the ledger,
// which parked c2 before the cancel reached it (router
// TestCancelReleasesCopyAfterForestall holds that window).
func TestResendThenCancelOnOneRouter(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	var sig signals
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_unsafe"}, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			sig.fire("started")
			if !sig.wait(ctx, "release") {
				return nil, fmt.Errorf("never released")
			}
			return textResult("slow done"), nil
		})
	})
	e.waitLive("slow_unsafe")
	// slow_unsafe runs alone: ext is the batch's next run.
	calls := []bus.Call{{ID: "c1", Name: "slow_unsafe"}, {ID: "c2", Name: "ext"}}
	first := e.sendAsync(t, "s1", "r1", calls)
	waitClosed(t, sig.ch("started"), "the first copy's c1 to start")
	again := e.sendAsync(t, "s1", "r1", calls)
	e.waitForLedgerWatcher(t) // the re-sent copy is running too: it waits for c1's record
	if err := e.client.Cancel(testCtx(t), "s1", "r1"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*bus.Reply{replyOf(t, first, "first copy"), replyOf(t, again, "re-sent copy")} {
		if len(r.Parked) != 0 {
			t.Fatalf("a call parked after the cancel: %s", jsonOf(r))
		}
		checkCallOrder(t, calls, r.Results)
		wantFailure(t, resultOf(t, r.Results, "c2"), bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
	}
	var list struct {
		Parked []struct{ ID string } `json:"parked"`
	}
	if err := e.client.Admin(t.Context(), "parked.list", "s1", nil, &list); err != nil || len(list.Parked) != 0 {
		t.Fatalf("parked.list after the cancel: %+v %v", list.Parked, err)
	}
}

// continuationCancelled reports whether the continuation of session's
// batch replyID in P_parked marks call as cancelled.
func continuationCancelled(t *testing.T, e *env, session, replyID, call string) error {
	t.Helper()
	js := testkit.JetStream(t, e.nc)
	kv, err := js.KeyValue(t.Context(), "toolbus_parked")
	if err != nil {
		return err
	}
	v, err := kv.Get(t.Context(), session+"."+replyID)
	if err != nil {
		return err
	}
	var cont struct {
		Cancelled []string `json:"cancelled"`
	}
	if err := json.Unmarshal(v.Value(), &cont); err != nil {
		return err
	}
	if !slices.Contains(cont.Cancelled, call) {
		return fmt.Errorf("continuation marks %v cancelled, not %s", cont.Cancelled, call)
	}
	return nil
}

// TestCancelledBeforeStartSurvivesResend: a call that a cancel ended before
// it started (a queued call, or one of a later run) stays interrupted in a
// re-sent copy of its batch (docs/protocol.md 3.1, 3.5, 1.11): the copy's
// reply says interrupted and the worker never runs it. Before, the call had
// no ledger entry (it never ran), so the copy claimed it and ran it.
func TestCancelledBeforeStartSurvivesResend(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	var sig signals
	var sideRuns, holdRuns atomic.Int32
	// side is a side effect that runs alone (not concurrency-safe): it is
	// queued behind a parked call, or a later run. A worker remembers a
	// cancel for two minutes and refuses the call itself (3.5), so the copy
	// is sent once a worker that never heard of the cancel serves side: as
	// after a worker's restart, or past those two minutes.
	addSide := func() *worker.Worker {
		return e.addWorker(func(w *worker.Worker) {
			handle(t, w, bus.ToolDef{Name: "side"}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				sideRuns.Add(1)
				return textResult("side ran"), nil
			})
		})
	}
	side := addSide()
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "hold"}, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			holdRuns.Add(1)
			sig.fire(c.ReplyID + "/started")
			if !sig.wait(ctx, c.ReplyID+"/release") {
				return nil, fmt.Errorf("never released")
			}
			return textResult("held"), nil
		})
	})
	e.waitLive("side", "hold")
	ev := e.watch(t, "s1")

	// resend sends the batch again and checks its reply: the first call's
	// result is first, side's is interrupted.
	resend := func(t *testing.T, replyID, first string, calls []bus.Call) {
		t.Helper()
		if err := side.Drain(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		side = addSide()
		e.waitLive("side")
		r := replyOf(t, e.sendAsync(t, "s1", replyID, calls), "re-sent copy")
		if len(r.Parked) != 0 || len(r.Results) != 2 {
			t.Fatalf("re-sent copy's reply: %s", jsonOf(r))
		}
		checkCallOrder(t, calls, r.Results)
		wantSuccess(t, r.Results[0], first)
		wantFailure(t, resultOf(t, r.Results, "c2"), bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
		if n := sideRuns.Load(); n != 0 {
			t.Fatalf("the cancelled call ran %d times", n)
		}
	}

	t.Run("queued", func(t *testing.T) {
		calls := []bus.Call{{ID: "c1", Name: "ext"}, {ID: "c2", Name: "side"}}
		r := e.callParked(t, "s1", "q1", calls...)
		if len(r.Parked) != 2 || r.Parked[1].Kind != bus.KindQueued {
			t.Fatalf("reply: %s", jsonOf(r))
		}
		if err := e.client.Cancel(testCtx(t), "s1", "q1", "c2"); err != nil {
			t.Fatal(err)
		}
		testkit.CheckFor(t, bound, 5*time.Millisecond, func() error { return continuationCancelled(t, e, "s1", "q1", "c2") })
		if err := e.answer(t, "ext", "s1", "q1", "c1", bus.Answer{State: "success", Output: bus.Text("picked")}); err != nil {
			t.Fatal(err)
		}
		var bd bus.BatchDone
		evs := collect(t, ev, batchDone("q1"))
		if err := evs[len(evs)-1].DataAs(&bd); err != nil {
			t.Fatal(err)
		}
		wantFailure(t, resultOf(t, bd.Results, "c2"), bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
		resend(t, "q1", "picked", calls)
	})

	t.Run("later run", func(t *testing.T) {
		calls := []bus.Call{{ID: "c1", Name: "hold"}, {ID: "c2", Name: "side"}}
		first := e.sendAsync(t, "s1", "l1", calls)
		waitClosed(t, sig.ch("l1/started"), "c1 to start")
		if err := e.client.Cancel(testCtx(t), "s1", "l1", "c2"); err != nil {
			t.Fatal(err)
		}
		// c2's call.result comes once its result is recorded (the ledger first).
		collect(t, ev, func(x *bus.Event) bool {
			return x.Type == bus.TypeCallResult && x.ReplyID == "l1" && x.ToolCallID == "c2"
		})
		sig.fire("l1/release")
		r := replyOf(t, first, "first copy")
		wantFailure(t, resultOf(t, r.Results, "c2"), bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
		resend(t, "l1", "held", calls)
		if n := holdRuns.Load(); n != 1 {
			t.Fatalf("c1 ran %d times, want 1", n)
		}
	})
}

// TestCancelledQueuedParkSurvivesResend: a call that would park (an
// external tool, or a tool that asks for a confirmation), queued behind a
// parked call and cancelled before it started, stays interrupted in a copy
// of its batch re-sent after batch.done (docs/protocol.md 3.5, 1.12): the
// copy's reply lists it interrupted, and nobody is asked again. On main the
// copy parked it again (parking read no ledger, and the call had no record).
func TestCancelledQueuedParkSurvivesResend(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	// ext_alone and ask_alone run alone (not concurrency-safe): queued
	// behind c1. registerDefs makes its tools concurrency-safe.
	ev := e.request(t, eventMsg(t, "toolbus.register", newEvent(t, bus.TypeRegister, bus.Register{Worker: "registrar-alone", Tools: []bus.ToolDef{
		{Name: "ext_alone", External: true, Permission: bus.PermissionAllow, InputSchema: json.RawMessage(`{"type":"object"}`)}}})))
	var ack bus.RegisterAck
	if err := ev.DataAs(&ack); err != nil || len(ack.Rejected) > 0 {
		t.Fatalf("register: %s %v", ev.Data, err)
	}
	var askRuns atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "ask_alone", Permission: bus.PermissionAsk}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			askRuns.Add(1)
			return textResult("asked and ran"), nil
		})
	})
	e.waitLive("ext_alone", "ask_alone")
	events := e.watch(t, "s1")
	for _, tc := range []struct{ name, tool, kind string }{
		{"external", "ext_alone", bus.KindExternal},
		{"confirm", "ask_alone", bus.KindConfirm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replyID := "q-" + tc.name
			calls := []bus.Call{{ID: "c1", Name: "ext"}, {ID: "c2", Name: tc.tool}}
			r := e.callParked(t, "s1", replyID, calls...)
			if len(r.Parked) != 2 || r.Parked[1].Kind != bus.KindQueued {
				t.Fatalf("reply: %s", jsonOf(r))
			}
			if err := e.client.Cancel(testCtx(t), "s1", replyID, "c2"); err != nil {
				t.Fatal(err)
			}
			testkit.CheckFor(t, bound, 5*time.Millisecond, func() error { return continuationCancelled(t, e, "s1", replyID, "c2") })
			if err := e.answer(t, "ext", "s1", replyID, "c1", bus.Answer{State: "success", Output: bus.Text("picked")}); err != nil {
				t.Fatal(err)
			}
			var bd bus.BatchDone
			evs := collect(t, events, batchDone(replyID))
			if err := evs[len(evs)-1].DataAs(&bd); err != nil {
				t.Fatal(err)
			}
			wantFailure(t, resultOf(t, bd.Results, "c2"), bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
			// The copy, after batch.done: c1 from its record, c2 interrupted,
			// nothing parked again.
			again := e.callParked(t, "s1", replyID, calls...)
			if len(again.Parked) != 0 || len(again.Results) != 2 {
				t.Fatalf("re-sent copy's reply (%s parked again?): %s", tc.kind, jsonOf(again))
			}
			wantSuccess(t, again.Results[0], "picked")
			wantFailure(t, resultOf(t, again.Results, "c2"), bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText)
		})
	}
	if n := askRuns.Load(); n != 0 {
		t.Fatalf("the cancelled confirm call ran %d times", n)
	}
}
