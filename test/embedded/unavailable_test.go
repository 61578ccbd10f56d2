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

// listed returns the names of the tools the session's model sees.
func (e *env) listed(t *testing.T, session string) []string {
	t.Helper()
	list, err := e.client.Tools(testCtx(t), session, bus.FormatToolbus, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, raw := range list.Tools {
		var d struct{ Name string }
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		names = append(names, d.Name)
	}
	return names
}

// waitUnlisted polls until no router lists any of names to session.
func (e *env) waitUnlisted(t *testing.T, session string, names ...string) {
	t.Helper()
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		// Every router answers in turn, as the queue group picks them.
		for range 2 * len(e.routers) {
			got := e.listed(t, session)
			for _, n := range names {
				if slices.Contains(got, n) {
					return fmt.Errorf("%s still listed: %q", n, got)
				}
			}
		}
		return nil
	})
}

// pingTool adds a concurrency-safe tool answering "pong".
func pingTool(t *testing.T, w *worker.Worker, name string) {
	t.Helper()
	handle(t, w, bus.ToolDef{Name: name, ConcurrencySafe: true},
		func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("pong"), nil })
}

// TestUnavailableAfterLeaving: once its only worker has stopped (and said it
// is leaving) a tool is no longer listed and calls to it are unavailable.
func TestUnavailableAfterLeaving(t *testing.T) {
	e := newEnv(t, 2)
	w := e.addWorker(func(w *worker.Worker) { pingTool(t, w, "flaky") })
	e.addWorker(func(w *worker.Worker) { pingTool(t, w, "steady") })
	e.waitLive("flaky", "steady")
	wantSuccess(t, e.call(t, "gone-1", []bus.Call{{ID: "c1", Name: "flaky"}}).Results[0], "pong")
	if got := e.listed(t, "gone-1"); !slices.Contains(got, "flaky") {
		t.Fatalf("flaky not listed while live: %q", got)
	}

	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// At once: the leaving worker no longer takes calls.
	reply := e.call(t, "gone-2", []bus.Call{{ID: "c1", Name: "flaky"}, {ID: "c2", Name: "steady"}})
	wantFailure(t, reply.Results[0], bus.StateError, bus.CodeUnavailable, "")
	wantSuccess(t, reply.Results[1], "pong")

	e.waitGone(t, "flaky")
	e.waitUnlisted(t, "gone-3", "flaky")
	if got := e.listed(t, "gone-3"); !slices.Contains(got, "steady") {
		t.Fatalf("steady not listed: %q", got)
	}
	for i := range 4 { // both routers, whichever the queue group picks
		reply := e.call(t, fmt.Sprintf("gone-4-%d", i), []bus.Call{{ID: "c1", Name: "flaky"}})
		wantFailure(t, reply.Results[0], bus.StateError, bus.CodeUnavailable, "")
	}
}

// TestUnavailableAfterCrash: a worker that vanishes without leaving (its
// connection closed) stops being live after three missed heartbeats; its
// tool is then unlisted and calls to it are unavailable.
func TestUnavailableAfterCrash(t *testing.T) {
	e := newEnv(t, 2)
	nc := e.connect(t)
	e.addWorkerOn(nc, func(w *worker.Worker) { pingTool(t, w, "crashy") })
	e.waitLive("crashy")
	wantSuccess(t, e.call(t, "crash-1", []bus.Call{{ID: "c1", Name: "crashy"}}).Results[0], "pong")

	nc.Close()
	e.waitGone(t, "crashy")
	e.waitUnlisted(t, "crash-3", "crashy")
	reply := e.call(t, "crash-4", []bus.Call{{ID: "c1", Name: "crashy"}})
	wantFailure(t, reply.Results[0], bus.StateError, bus.CodeUnavailable, "")
}

// TestLivenessKeptByHeartbeats: a worker that keeps beating stays live on
// every router well past the three-beat expiry of a single registration.
func TestLivenessKeptByHeartbeats(t *testing.T) {
	e := newEnv(t, 2)
	e.addWorker(func(w *worker.Worker) { pingTool(t, w, "steady") })
	e.waitLive("steady")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	over := time.After(6 * testHeartbeat) // twice the expiry
	for watching := true; watching; {
		for id, st := range e.statuses(t) { // one status from every router
			if ts, ok := toolStatus(st, "steady"); !ok || ts.LiveWorkers == 0 {
				t.Fatalf("router %s lost the live tool between heartbeats", id)
			}
		}
		select {
		case <-tick.C:
		case <-over:
			watching = false
		}
	}
	wantSuccess(t, e.call(t, "beats", []bus.Call{{ID: "c1", Name: "steady"}}).Results[0], "pong")
}

// TestUnavailableReSentRuns: a side-effecting call whose exec request finds
// no worker (the only one's connection just closed, its liveness not
// expired yet) is unavailable, and a re-send of the batch once a worker is
// live runs it (docs/protocol.md 3.1: "an unavailable result always means
// nothing ran, and a re-send may run the call"): the ledger does not keep
// the unavailable result as the call's answer.
func TestUnavailableReSentRuns(t *testing.T) {
	e := newEnv(t, 1)
	var ran atomic.Int32
	side := func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "charge", Description: "Charges once.", Permission: bus.PermissionAllow, InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				ran.Add(1)
				return textResult("charged"), nil
			})
	}
	nc := e.connect(t)
	e.addWorkerOn(nc, side)
	e.waitLive("charge")
	nc.Close() // a crash: the router still sees the worker live for three beats
	calls := []bus.Call{{ID: "c1", Name: "charge"}}
	r := e.call(t, "resend-1", calls, client.WithReplyID("r1"))
	wantFailure(t, r.Results[0], bus.StateError, bus.CodeUnavailable, "")
	e.addWorker(side)
	e.waitLive("charge")
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		r := e.call(t, "resend-1", calls, client.WithReplyID("r1"))
		if r.Results[0].State != bus.StateSuccess {
			return fmt.Errorf("re-send: %s", jsonOf(r.Results[0]))
		}
		return nil
	})
	if n := ran.Load(); n != 1 {
		t.Fatalf("ran %d times, want once", n)
	}
}
