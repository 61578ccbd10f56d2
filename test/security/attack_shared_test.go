package security

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackSharedAgentTasks (the red team's residual risk, session 17):
// the shared agent logs in once and may call in any session that has no
// agent user of its own, and its batches run as no user, so only the
// per-session bound (8) held its background tasks: a new session each 8
// tasks, without end. Its sessions bound to no user now count together
// as one user's (MaxPerUser, 2 here): the third session's task is refused
// limit_exceeded at its timeout, while alice's bound session s1 still
// gets its own.
func TestAttackSharedAgentTasks(t *testing.T) {
	d := newDeployment(t, func(c *router.Config) { c.Tasks.MaxPerUser = 2 })
	gate := make(chan struct{})
	defer close(gate) // before the worker's drain, a cleanup
	gatedWorker(t, d, gate, nil, bus.ToolDef{Name: "long_job", Description: "Runs long.", ReadOnly: true, ConcurrencySafe: true,
		TimeoutMS: 200, Background: true})

	call := func(cl *client.Client, session string) bus.Result {
		t.Helper()
		r, err := cl.Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{{ID: "c", Name: "long_job"}}})
		if err != nil {
			t.Fatalf("a call in %s: %v", session, err)
		}
		return r.Results[0]
	}
	shared := d.conn("agent").client()
	for _, s := range []string{"x1", "x2"} {
		if r := call(shared, s); r.State != bus.StateBackground {
			t.Fatalf("the shared agent's task in %s: %s %q", s, r.State, textOf(r))
		}
	}
	r := call(shared, "x3")
	if r.State != bus.StateError || r.Error == nil || r.Error.Code != bus.CodeLimitExceeded ||
		!strings.Contains(textOf(r), "this shared agent (its sessions bound to no user, together) already has 2 background tasks running") {
		t.Fatalf("the shared agent's third session: want its bound, got %s %q", r.State, textOf(r))
	}
	if r := call(d.conn("session-s1").client(), "s1"); r.State != bus.StateBackground {
		t.Fatalf("alice's task in her bound session while the shared agent is at its bound: %s %q", r.State, textOf(r))
	}
	// s2 has an agent login of its own, bound to no user: its tasks are
	// its session's, not the shared agent's (1.13; through 1.12 it was
	// refused the shared agent's bound here).
	if r := call(d.conn("session-s2").client(), "s2"); r.State != bus.StateBackground {
		t.Fatalf("s2's task (a login of its own, no user) while the shared agent is at its bound: %s %q", r.State, textOf(r))
	}
}

// gatedWorker starts a worker of defs (an empty object schema each): a
// call counts in running (when set) and waits for gate, except a call of
// "quick", which answers at once.
func gatedWorker(t *testing.T, d *deployment, gate <-chan struct{}, running *atomic.Int32, defs ...bus.ToolDef) {
	t.Helper()
	w, err := worker.New(d.conn("worker").nc, worker.Config{Heartbeat: testHeartbeat})
	must(t, err)
	for _, def := range defs {
		def.InputSchema = json.RawMessage(`{"type":"object","properties":{}}`)
		must(t, w.Handle(def, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			if def.Name == "quick" {
				return &bus.ExecResult{Output: bus.Text("quick")}, nil
			}
			if running != nil {
				running.Add(1)
			}
			select {
			case <-gate:
				return &bus.ExecResult{Output: bus.Text("done")}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}))
	}
	must(t, w.Start(t.Context()))
	testkit.Stop(t, w.Drain)
	testkit.Recv(t, w.Registered(), bound, "the worker's registration")
}

func textOf(r bus.Result) string {
	var parts []string
	for _, b := range r.Output {
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n")
}

// TestAttackSharedAgentSlots (the red team's residual risk, session 17):
// a session's share of the router's slots does not bound the shared agent,
// which may call in any number of sessions: one batch in each of many
// sessions held every slot, and a bound session's batch waited. The
// sessions bound to no user hold at most three quarters of the slots
// together (12 of 16 here); past it their batches are answered busy (the
// client retries them), and alice's batch in s1 runs.
func TestAttackSharedAgentSlots(t *testing.T) {
	const slots = 16
	d := newDeployment(t, func(c *router.Config) { c.MaxInflight = slots })
	gate := make(chan struct{})
	defer close(gate) // before the worker's drain, a cleanup
	var running atomic.Int32
	gatedWorker(t, d, gate, &running, bus.ToolDef{Name: "hold", Description: "Holds.", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 120_000},
		bus.ToolDef{Name: "quick", Description: "Answers.", ReadOnly: true})

	shared := d.conn("agent").client()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const flood = 2 * slots
	for i := range flood { // one batch in each of many sessions: each within its own share
		go func() {
			_, _ = shared.Call(ctx, fmt.Sprintf("x%d", i), bus.Batch{Calls: []bus.Call{{ID: "c", Name: "hold"}}})
		}()
	}
	pool := slots - slots/4
	poll, pcancel := context.WithTimeout(t.Context(), bound)
	defer pcancel()
	for int(running.Load()) < pool {
		if bus.Sleep(poll, 20*time.Millisecond) != nil {
			t.Fatalf("after %s, %d of the shared agent's batches run; want %d", bound, running.Load(), pool)
		}
	}
	octx, ocancel := context.WithTimeout(t.Context(), bound)
	defer ocancel()
	r, err := d.conn("session-s1").client().Call(octx, "s1", bus.Batch{Calls: []bus.Call{{ID: "q", Name: "quick"}}})
	if err != nil || r.Results[0].State != bus.StateSuccess {
		t.Fatalf("alice's batch in s1 while the shared agent floods its sessions: %v %+v", err, r)
	}
	if n := running.Load(); int(n) != pool {
		t.Fatalf("%d of the shared agent's batches run at once; its sessions' pool is %d", n, pool)
	}
}
