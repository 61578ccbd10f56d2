package embedded

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/tasks"
	"github.com/toolbus/toolbus/worker"
)

// Copies of a call that goes background (docs/protocol.md 3.1 and 5.10,
// revision 1.11): an agent that re-sends a batch (same reply id) gets the
// task the first copy started, whatever the tool, and the call runs once.

// runCount counts a tool's runs per reply id and says when each starts.
type runCount struct {
	mu      sync.Mutex
	runs    map[string]int
	started chan string // the reply id of each run, as it starts
}

func newRunCount() *runCount {
	return &runCount{runs: map[string]int{}, started: make(chan string, 16)}
}

func (rc *runCount) of(reply string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.runs[reply]
}

// gatedCounted counts the run, then waits for g (or its context) and
// answers "done <call id>".
func (rc *runCount) gatedCounted(g *gate) worker.Handler {
	return func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
		rc.mu.Lock()
		rc.runs[c.ReplyID]++
		rc.mu.Unlock()
		rc.started <- c.ReplyID
		select {
		case <-g.ch:
			return textResult("done " + c.ID), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// waitStarted waits until a run of reply starts.
func (rc *runCount) waitStarted(t *testing.T, reply string) {
	t.Helper()
	timeout := time.After(bound)
	for {
		select {
		case r := <-rc.started:
			if r == reply {
				return
			}
		case <-timeout:
			t.Fatalf("no run of %s started", reply)
		}
	}
}

// TestTaskResendAfterHandoff: a call became a task; the agent re-sends the
// batch. The copy's result is the same handle (the same task id), the
// worker ran the call once and the session has one task, counted once
// against its bound, for a read-only tool (which the ledger does not
// record) and a side-effecting one alike; a copy after the task ended
// gets the handle again and get gives the result; a call of a new batch
// is a new task. Before 1.11 the copy started a second task with its own
// id (a read-only call a second run too).
func TestTaskResendAfterHandoff(t *testing.T) {
	for _, tc := range []struct {
		name string
		def  bus.ToolDef
	}{
		{"read-only", bus.ToolDef{Name: "slow_look", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true}},
		{"side-effecting", bus.ToolDef{Name: "slow_write", ConcurrencySafe: true, TimeoutMS: 200, Background: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t, 1, false, router.Config{Tasks: router.TasksConfig{MaxPerSession: 2}})
			g := newGate(t)
			rc := newRunCount()
			e.addWorker(func(w *worker.Worker) { handle(t, w, tc.def, rc.gatedCounted(g)) })
			e.waitLive(tc.def.Name)
			const session = "task-resend"
			ctx := testCtx(t)
			calls := []bus.Call{{ID: "c1", Name: tc.def.Name}}

			id := backgrounded(t, e.batch(t, session, bus.Batch{Calls: calls}, client.WithReplyID("turn-1")).Results[0])
			if want := tasks.ID(session, "turn-1", "c1"); id != want {
				t.Fatalf("task id %s, want the call's %s", id, want)
			}
			again := backgrounded(t, e.batch(t, session, bus.Batch{Calls: calls}, client.WithReplyID("turn-1")).Results[0])
			if again != id {
				t.Fatalf("the re-sent copy got task %s, the first copy %s: two tasks for one call", again, id)
			}
			if list, err := e.client.Tasks().List(ctx, session); err != nil || len(list) != 1 {
				t.Fatalf("the session's tasks after the copy: %v %s", err, jsonOf(list))
			}
			// A new batch's call is a new task, within the bound of 2: the
			// copy took no slot.
			other := backgrounded(t, e.batch(t, session, bus.Batch{Calls: calls}, client.WithReplyID("turn-2")).Results[0])
			if other == id {
				t.Fatalf("a new batch's call got the old task %s", id)
			}

			g.open()
			got, err := e.client.Tasks().Wait(ctx, session, bound, id, other)
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range got {
				if task.State != bus.StateSuccess || task.Result == nil || textOf(*task.Result) != "done c1" {
					t.Fatalf("task %s: %s", task.ID, jsonOf(task))
				}
			}
			// After the end: the same handle, and get gives the result.
			late := backgrounded(t, e.batch(t, session, bus.Batch{Calls: calls}, client.WithReplyID("turn-1")).Results[0])
			if late != id {
				t.Fatalf("a copy after the end got task %s, want %s", late, id)
			}
			if task, err := e.client.Tasks().Get(ctx, session, id); err != nil || task.State != bus.StateSuccess {
				t.Fatalf("get after the late copy: %v %s", err, jsonOf(task))
			}
			if n, m := rc.of("turn-1"), rc.of("turn-2"); n != 1 || m != 1 {
				t.Fatalf("runs: turn-1 %d, turn-2 %d; want 1 each", n, m)
			}
			if list, err := e.client.Tasks().List(ctx, session); err != nil || len(list) != 2 {
				t.Fatalf("the session's tasks: %v %s", err, jsonOf(list))
			}
		})
	}
}

// TestTaskResendAfterCancel: a copy of a call whose task was cancelled gets
// that task's handle; the task stays interrupted and nothing runs again.
func TestTaskResendAfterCancel(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{})
	g := newGate(t) // never opened: the run ends by the cancel
	rc := newRunCount()
	def := bus.ToolDef{Name: "slow_cancel", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true}
	e.addWorker(func(w *worker.Worker) { handle(t, w, def, rc.gatedCounted(g)) })
	e.waitLive(def.Name)
	const session = "task-resend-cancel"
	ctx := testCtx(t)
	calls := []bus.Call{{ID: "c1", Name: def.Name}}
	id := backgrounded(t, e.batch(t, session, bus.Batch{Calls: calls}, client.WithReplyID("turn-1")).Results[0])
	if task, err := e.client.Tasks().Cancel(ctx, session, id); err != nil || task.State != bus.StateInterrupted {
		t.Fatalf("cancel: %v %s", err, jsonOf(task))
	}
	again := backgrounded(t, e.batch(t, session, bus.Batch{Calls: calls}, client.WithReplyID("turn-1")).Results[0])
	if again != id {
		t.Fatalf("the copy got task %s, want the cancelled %s", again, id)
	}
	task, err := e.client.Tasks().Get(ctx, session, id)
	if err != nil || task.State != bus.StateInterrupted {
		t.Fatalf("the cancelled task after the copy: %v %s", err, jsonOf(task))
	}
	if n := rc.of("turn-1"); n != 1 {
		t.Fatalf("runs: %d, want 1", n)
	}
}

// TestTaskCopyJoinsRun: a copy that arrives while this router still runs
// the call before its deadline runs nothing: it waits for the first run's
// outcome, here its result in time.
func TestTaskCopyJoinsRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := startEnv(t, 1, false, router.Config{Metrics: reg})
	g := newGate(t)
	rc := newRunCount()
	def := bus.ToolDef{Name: "slow_join", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 60_000, Background: true}
	e.addWorker(func(w *worker.Worker) { handle(t, w, def, rc.gatedCounted(g)) })
	e.waitLive(def.Name)
	const session = "task-join"
	calls := []bus.Call{{ID: "c1", Name: def.Name}}
	first := e.sendAsync(t, session, "turn-1", calls)
	rc.waitStarted(t, "turn-1")
	copied := e.sendAsync(t, session, "turn-1", calls)
	waitHits(t, reg, 1) // the copy joined the first run
	g.open()
	for _, r := range []*bus.Reply{replyOf(t, first, "the first copy"), replyOf(t, copied, "the copy")} {
		if len(r.Results) != 1 || r.Results[0].State != bus.StateSuccess || textOf(r.Results[0]) != "done c1" {
			t.Fatalf("reply: %s", jsonOf(r))
		}
	}
	if n := rc.of("turn-1"); n != 1 {
		t.Fatalf("runs: %d, want 1", n)
	}
}

// TestTaskCopyBeforeHandoff: a copy sent while the first copy's run is
// still before its handoff gets the same task: one task, one handle, one
// run. On one router the copy joins the first run (or, if it arrives after
// the handoff on a loaded machine, finds the task stored); either way it
// runs nothing.
func TestTaskCopyBeforeHandoff(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{Tasks: router.TasksConfig{MaxPerSession: 1}})
	g := newGate(t)
	rc := newRunCount()
	def := bus.ToolDef{Name: "slow_race", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 1000, Background: true}
	e.addWorker(func(w *worker.Worker) { handle(t, w, def, rc.gatedCounted(g)) })
	e.waitLive(def.Name)
	const session = "task-race"
	calls := []bus.Call{{ID: "c1", Name: def.Name}}
	first := e.sendAsync(t, session, "turn-1", calls)
	rc.waitStarted(t, "turn-1")
	copied := e.sendAsync(t, session, "turn-1", calls)
	id := backgrounded(t, replyOf(t, first, "the first copy").Results[0])
	if again := backgrounded(t, replyOf(t, copied, "the copy").Results[0]); again != id {
		t.Fatalf("the copy got task %s, the first %s", again, id)
	}
	ctx := testCtx(t)
	if list, err := e.client.Tasks().List(ctx, session); err != nil || len(list) != 1 {
		t.Fatalf("the session's tasks: %v %s", err, jsonOf(list))
	}
	g.open()
	if got, err := e.client.Tasks().Wait(ctx, session, bound, id); err != nil || got[0].State != bus.StateSuccess {
		t.Fatalf("wait: %v %s", err, jsonOf(got))
	}
	if n := rc.of("turn-1"); n != 1 {
		t.Fatalf("runs: %d, want 1", n)
	}
}

// TestTaskCopiesOnTwoRouters: copies of a side-effecting call on two
// routers, the copy with the earlier deadline (its batch's expirytime),
// so that when they land on different routers the copy, not the run that
// holds the ledger's claim, makes the task: one task, one run (the
// ledger), and the task ends with the run's result, not interrupted (the
// router that lost the create lets its run go on to record its result).
func TestTaskCopiesOnTwoRouters(t *testing.T) {
	e := startEnv(t, 2, false, router.Config{})
	g := newGate(t)
	rc := newRunCount()
	def := bus.ToolDef{Name: "slow_two", ConcurrencySafe: true, TimeoutMS: 3000, Background: true}
	e.addWorker(func(w *worker.Worker) { handle(t, w, def, rc.gatedCounted(g)) })
	e.waitLive(def.Name)
	const session = "task-two"
	calls := []bus.Call{{ID: "c1", Name: def.Name}}
	first := e.sendAsync(t, session, "turn-1", calls)
	rc.waitStarted(t, "turn-1")
	ctx := testCtx(t)
	copied := make(chan sent, 1)
	go func() {
		r, err := e.client.Call(ctx, session, bus.Batch{Calls: calls}, client.WithReplyID("turn-1"),
			client.WithExpiry(time.Now().Add(300*time.Millisecond)))
		copied <- sent{r, err}
	}()
	id := backgrounded(t, replyOf(t, first, "the first copy").Results[0])
	if again := backgrounded(t, replyOf(t, copied, "the copy").Results[0]); again != id {
		t.Fatalf("the copy got task %s, the first %s", again, id)
	}
	if list, err := e.client.Tasks().List(ctx, session); err != nil || len(list) != 1 {
		t.Fatalf("the session's tasks: %v %s", err, jsonOf(list))
	}
	g.open()
	got, err := e.client.Tasks().Wait(ctx, session, bound, id)
	if err != nil || got[0].State != bus.StateSuccess || textOf(*got[0].Result) != "done c1" {
		t.Fatalf("wait: %v %s", err, jsonOf(got))
	}
	if n := rc.of("turn-1"); n != 1 {
		t.Fatalf("runs: %d, want 1", n)
	}
}

// waitHits polls the router's dedupe hits until they reach n.
func waitHits(t *testing.T, reg *prometheus.Registry, n float64) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for gather(t, reg)["toolbus_router_dedupe_hits_total"] < n {
		if time.Now().After(deadline) {
			t.Fatalf("dedupe hits did not reach %v", n)
		}
		time.Sleep(10 * time.Millisecond) // bounded polling of a counter
	}
}
