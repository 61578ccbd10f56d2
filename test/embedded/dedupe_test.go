package embedded

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// TestDedupe: re-sending a batch (same session, same reply id) never runs a
// tool that is not read-only twice; the re-sent batch gets the first run's
// results, waiting for them when the first run is still going.
func TestDedupe(t *testing.T) {
	e := newEnv(t, 2) // the re-sent batch may land on either router
	var writes, reads, blocks atomic.Int64
	var sig signals
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "write", ConcurrencySafe: true},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				return textResult(fmt.Sprintf("write run %d", writes.Add(1))), nil
			})
		handle(t, w, bus.ToolDef{Name: "read", ConcurrencySafe: true, ReadOnly: true},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				reads.Add(1)
				return textResult("read"), nil
			})
		handle(t, w, bus.ToolDef{Name: "slow_write", ConcurrencySafe: true},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				n := blocks.Add(1)
				sig.fire(c.SessionID + "/started")
				if !sig.wait(ctx, c.SessionID+"/release") {
					return nil, fmt.Errorf("never released")
				}
				return textResult(fmt.Sprintf("slow run %d", n)), nil
			})
	})
	e.waitLive("write", "read", "slow_write")

	t.Run("re-sent after the first finished", func(t *testing.T) {
		calls := []bus.Call{{ID: "w1", Name: "write"}, {ID: "r1", Name: "read"}, {ID: "u1", Name: "unknown_tool"}}
		replyID := client.NewReplyID()
		first := e.call(t, "dedupe-1", calls, client.WithReplyID(replyID))
		wantSuccess(t, first.Results[0], "write run 1")
		wantSuccess(t, first.Results[1], "read")
		for i := range 3 {
			again := e.call(t, "dedupe-1", calls, client.WithReplyID(replyID))
			if diff := cmp.Diff(first.Results[0], again.Results[0]); diff != "" {
				t.Fatalf("re-send %d: write result differs (-first +again):\n%s", i, diff)
			}
			wantSuccess(t, again.Results[1], "read") // read-only: may or may not run again
			if diff := cmp.Diff(first.Results[2], again.Results[2]); diff != "" {
				t.Fatalf("re-send %d: unknown tool result differs:\n%s", i, diff)
			}
		}
		if n := writes.Load(); n != 1 {
			t.Fatalf("write ran %d times, want 1", n)
		}
		// Another session may use the same reply id: it is another batch.
		other := e.call(t, "dedupe-1b", calls, client.WithReplyID(replyID))
		wantSuccess(t, other.Results[0], "write run 2")
		// And another reply id in the same session is another turn.
		next := e.call(t, "dedupe-1", calls)
		wantSuccess(t, next.Results[0], "write run 3")
	})

	t.Run("re-sent while the first still runs", func(t *testing.T) {
		const session = "dedupe-2"
		calls := []bus.Call{{ID: "s1", Name: "slow_write"}, {ID: "r1", Name: "read"}}
		replyID := client.NewReplyID()
		type out struct {
			reply *bus.Reply
			err   error
		}
		replies := make(chan out, 2)
		ctx := testCtx(t)
		send := func() {
			r, err := e.client.Call(ctx, session, bus.Batch{Calls: calls}, client.WithReplyID(replyID))
			replies <- out{r, err}
		}
		before := blocks.Load()
		go send()
		waitClosed(t, sig.ch(session+"/started"), "the first run to start")
		go send()
		e.waitForLedgerWatcher(t)
		sig.fire(session + "/release")
		var got []*bus.Reply
		for range 2 {
			select {
			case o := <-replies:
				if o.err != nil {
					t.Fatal(o.err)
				}
				checkCallOrder(t, calls, o.reply.Results)
				got = append(got, o.reply)
			case <-time.After(bound):
				t.Fatal("a reply never came")
			}
		}
		wantSuccess(t, got[0].Results[0], fmt.Sprintf("slow run %d", before+1))
		if diff := cmp.Diff(got[0].Results[0], got[1].Results[0]); diff != "" {
			t.Fatalf("the two replies differ (-one +other):\n%s", diff)
		}
		wantSuccess(t, got[1].Results[1], "read")
		if n := blocks.Load() - before; n != 1 {
			t.Fatalf("slow_write ran %d times, want 1", n)
		}
	})
}

// waitForLedgerWatcher waits, at most a few seconds and without failing,
// until someone watches the dedupe ledger: the sign that a re-sent batch
// waits for the first run's result. If the router waits some other way, the
// test still holds; it is only less sure to exercise the waiting path.
func (e *env) waitForLedgerWatcher(t *testing.T) {
	t.Helper()
	js := testkit.JetStream(t, e.nc)
	stream := "KV_" + e.client.Subjects().Bucket(bus.BucketLedger)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(3 * time.Second)
	for {
		if s, err := js.Stream(t.Context(), stream); err == nil {
			if info, err := s.Info(t.Context()); err == nil && info.State.Consumers > 0 {
				return
			}
		}
		select {
		case <-tick.C:
		case <-giveUp:
			t.Log("no ledger watcher seen; the re-sent batch may arrive after the first finished")
			return
		}
	}
}
