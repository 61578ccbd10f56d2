package embedded

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// drainSlack bounds how long past its deadline a drain may take on a busy
// machine: the cleanup after the deadline is a couple of seconds at most.
const drainSlack = 3 * time.Second

// drainEnv is one router that takes a batch, a worker with a gated tool,
// and a second router started after the batch arrived.
type drainEnv struct {
	*env
	entered chan string
	release chan struct{}
}

func newDrainEnv(t *testing.T) *drainEnv {
	t.Helper()
	d := &drainEnv{env: newEnv(t, 1), entered: make(chan string, 16), release: make(chan struct{})}
	gated := func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
		d.entered <- c.ID
		select {
		case <-d.release:
			return textResult("done " + c.ID), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d.addWorker(func(w *worker.Worker) {
		// Not read-only: its runs go through the ledger.
		handle(t, w, bus.ToolDef{Name: "gated", TimeoutMS: 120_000, ConcurrencySafe: true}, gated)
		handle(t, w, bus.ToolDef{Name: "quick", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return textResult("quick"), nil
		})
	})
	// Runs before the worker's cleanup: a call still blocked ends.
	t.Cleanup(func() {
		select {
		case <-d.release:
		default:
			close(d.release)
		}
	})
	d.waitLive("gated", "quick")
	return d
}

type callOutcome struct {
	reply *bus.Reply
	err   error
}

// send calls calls on the only router there is yet, in the background.
func (d *drainEnv) send(ctx context.Context, session, replyID string, calls []bus.Call) <-chan callOutcome {
	out := make(chan callOutcome, 1)
	go func() {
		reply, err := d.client.Call(ctx, session, bus.Batch{Calls: calls}, client.WithReplyID(replyID))
		out <- callOutcome{reply, err}
	}()
	return out
}

// waitUnsubscribed waits until router i has no subscription left on the
// batch subjects: from then on, only the other routers get batches.
func (d *drainEnv) waitUnsubscribed(t *testing.T, i int) {
	t.Helper()
	cid, err := d.rconns[i].GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	calls := d.client.Subjects().All("call")
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		cz, err := d.srv.Connz(&server.ConnzOptions{CID: cid, Subscriptions: true})
		if err != nil {
			return err
		}
		for _, c := range cz.Conns {
			for _, s := range c.Subs {
				if s == calls {
					return fmt.Errorf("router %d still subscribed on %s", i, s)
				}
			}
		}
		return nil
	})
}

// answeredBy sends a batch of quick and returns the id of the router that
// answered it.
func (d *drainEnv) answeredBy(t *testing.T, session string) string {
	t.Helper()
	ev := newEvent(t, bus.TypeCallBatch, bus.Batch{Calls: []bus.Call{{ID: "q1", Name: "quick"}}})
	ev.SessionID = session
	reply := d.request(t, eventMsg(t, d.client.Subjects().Call(session), ev))
	if reply.Type != bus.TypeCallReply {
		t.Fatalf("reply %s: %s", reply.Type, reply.Data)
	}
	return strings.TrimPrefix(reply.Source, "toolbus/router/")
}

func TestDrainLetsCallsInFlightFinish(t *testing.T) {
	d := newDrainEnv(t)
	r1 := d.routers[0]
	calls := []bus.Call{{ID: "c1", Name: "gated"}, {ID: "c2", Name: "gated"}}
	got := d.send(testCtx(t), "s1", "reply1", calls)
	testkit.Recv(t, d.entered, bound, "first call running")
	testkit.Recv(t, d.entered, bound, "second call running")
	r2 := d.addRouter()
	d.waitLive("gated", "quick")

	const deadline = 60 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	drained := make(chan error, 1)
	go func() { drained <- r1.Drain(ctx) }()
	d.waitUnsubscribed(t, 0)
	// New batches go to the other router while r1 drains.
	for i := range 5 {
		if by := d.answeredBy(t, fmt.Sprintf("new%d", i)); by != r2.ID() {
			t.Fatalf("a batch sent during the drain was answered by %s, want the other router %s", by, r2.ID())
		}
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with calls in flight", err)
	default:
	}
	close(d.release)
	out := testkit.Recv(t, got, bound, "reply of the batch in flight")
	if out.err != nil {
		t.Fatalf("batch in flight: %v", out.err)
	}
	checkCallOrder(t, calls, out.reply.Results)
	wantSuccess(t, out.reply.Results[0], "done c1")
	wantSuccess(t, out.reply.Results[1], "done c2")
	if err := testkit.Recv(t, drained, bound, "Drain"); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if took := time.Since(start); took > deadline {
		t.Fatalf("Drain took %v", took)
	}
	waitClosed(t, r1.Closed(), "r1 closed")
	// Callable twice: the same result, at once.
	if err := r1.Drain(context.Background()); err != nil {
		t.Fatalf("second Drain: %v", err)
	}
	r1.Stop(t.Context())
}

func TestDrainCutsOffSlowCallsAtItsDeadline(t *testing.T) {
	d := newDrainEnv(t)
	r1 := d.routers[0]
	calls := []bus.Call{{ID: "c1", Name: "gated"}}
	actx, acancel := context.WithCancel(testCtx(t))
	defer acancel()
	got := d.send(actx, "s1", "reply1", calls)
	testkit.Recv(t, d.entered, bound, "slow call running")
	r2 := d.addRouter()
	d.waitLive("gated", "quick")

	const deadline = time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	drained := make(chan error, 1)
	go func() { drained <- r1.Drain(ctx) }()
	d.waitUnsubscribed(t, 0)
	if by := d.answeredBy(t, "new"); by != r2.ID() {
		t.Fatalf("a batch sent during the drain was answered by %s, want %s", by, r2.ID())
	}
	err := testkit.Recv(t, drained, bound, "Drain")
	took := time.Since(start)
	if took > deadline+drainSlack {
		t.Fatalf("Drain took %v, past its %v deadline by more than %v", took, deadline, drainSlack)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 calls cut off") {
		t.Fatalf("Drain: %v, want 1 call cut off and context.DeadlineExceeded", err)
	}
	waitClosed(t, r1.Closed(), "r1 closed")
	if err2 := r1.Drain(context.Background()); err2 != err {
		t.Fatalf("second Drain: %v, want %v", err2, err)
	}
	// The agent gets no reply for the batch cut off...
	select {
	case out := <-got:
		t.Fatalf("the batch cut off was answered: %+v", out)
	case <-time.After(250 * time.Millisecond):
	}
	acancel()
	if out := testkit.Recv(t, got, bound, "the agent giving up"); out.err == nil {
		t.Fatalf("the batch cut off was answered: %s", jsonOf(out.reply))
	}
	// ... and a re-send recovers it through the ledger, on the other
	// router: the call may have taken effect, so it does not run again.
	reply, err := d.client.Call(testCtx(t), "s1", bus.Batch{Calls: calls}, client.WithReplyID("reply1"))
	if err != nil {
		t.Fatalf("re-send: %v", err)
	}
	checkCallOrder(t, calls, reply.Results)
	wantFailure(t, reply.Results[0], bus.StateError, bus.CodeUnknownOutcome, "")
	select {
	case id := <-d.entered:
		t.Fatalf("call %s ran again after the re-send", id)
	default:
	}
}

// A lone router that drains keeps recording its workers' heartbeats: the
// worker of a call that outlives three heartbeats is not taken for
// vanished (unknown_outcome) while it still runs, and the call is let run
// until the drain's deadline.
func TestDrainKeepsHeartbeats(t *testing.T) {
	d := newDrainEnv(t)
	ev := d.watch(t, "s1")
	ctx, cancel := context.WithTimeout(t.Context(), 3*bound)
	defer cancel()
	d.send(ctx, "s1", "r1", []bus.Call{{ID: "c1", Name: "gated"}})
	testkit.Recv(t, d.entered, bound, "the call to start")
	r := d.routers[0]
	deadline := 8 * testHeartbeat // past the watchdog's three beats and its tick
	dctx, dcancel := context.WithTimeout(context.Background(), deadline)
	defer dcancel()
	if err := r.Drain(dctx); err == nil || !strings.Contains(err.Error(), "1 calls cut off") {
		t.Fatalf("drain: %v, want the one call cut off at the deadline", err)
	}
	for {
		select {
		case e := <-ev.C:
			if e.Type == bus.TypeCallResult && e.ToolCallID == "c1" {
				t.Fatalf("the call ended during the drain: %s", e.Data)
			}
			continue
		default:
		}
		return
	}
}
