package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// gate releases a tool's runs when the test says so.
type gate struct{ ch chan struct{} }

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() {
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}

// gated is a tool that reports "step 1" as progress, then waits for g (or
// its context) and answers "done <input>".
func gated(g *gate, started chan<- string) worker.Handler {
	return func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
		_ = c.Progress(bus.Text("step 1")...)
		if started != nil {
			started <- c.ID
		}
		select {
		case <-g.ch:
			return textResult("done " + c.ID), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// backgrounded checks that r is a task handle and returns its id.
func backgrounded(t *testing.T, r bus.Result) string {
	t.Helper()
	if r.State != bus.StateBackground || r.Task == nil || r.Task.ID == "" || r.Task.State != bus.StateBackground {
		t.Fatalf("want a background handle, got %+v", r)
	}
	if !strings.Contains(textOf(r), r.Task.ID) || !strings.Contains(textOf(r), builtin.WaitTasksName) {
		t.Fatalf("the handle's text does not say how to follow it: %q", textOf(r))
	}
	return r.Task.ID
}

// TestTaskBackground: a call past its timeout goes on as a task (its tool
// declares it, or the call asks), its output is read while it runs, and a
// wait on two tasks returns both with their results.
func TestTaskBackground(t *testing.T) {
	e := newEnv(t, 1)
	g := newGate(t)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_bg", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 300, Background: true}, gated(g, nil))
		handle(t, w, bus.ToolDef{Name: "slow_plain", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 300}, gated(g, nil))
	})
	e.waitLive("slow_bg", "slow_plain")
	const session = "task-bg"
	ev := e.watch(t, session)

	reply := e.call(t, session, []bus.Call{{ID: "c1", Name: "slow_bg"}, {ID: "c2", Name: "slow_plain", Background: true}})
	id1, id2 := backgrounded(t, reply.Results[0]), backgrounded(t, reply.Results[1])

	// Without the flag on either side, the call still ends timeout.
	plain := e.call(t, session, []bus.Call{{ID: "c3", Name: "slow_plain"}})
	wantFailure(t, plain.Results[0], bus.StateError, bus.CodeTimeout, "Tool execution timeout after 300ms")

	// Its output so far, while it runs.
	ctx := testCtx(t)
	deadline := time.Now().Add(bound)
	for {
		task, out, err := e.client.Tasks().Output(ctx, session, id1)
		if err != nil {
			t.Fatal(err)
		}
		if task.State != bus.StateBackground {
			t.Fatalf("task ended before it was released: %+v", task)
		}
		if len(out) > 0 {
			if out[0].Text != "step 1" {
				t.Fatalf("output so far: %+v", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no output so far read")
		}
		time.Sleep(20 * time.Millisecond) // bounded polling: the progress event is stored asynchronously
	}
	list, err := e.client.Tasks().List(ctx, session)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %v %+v", err, list)
	}
	// A short wait returns them still running.
	still, err := e.client.Tasks().Wait(ctx, session, 50*time.Millisecond, id1, id2)
	if err != nil || len(still) != 2 || still[0].State != bus.StateBackground {
		t.Fatalf("short wait: %v %+v", err, still)
	}

	g.open()
	got, err := e.client.Tasks().Wait(ctx, session, bound, id1, id2)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"done c1", "done c2"} {
		if got[i].State != bus.StateSuccess || got[i].Result == nil || textOf(*got[i].Result) != want || got[i].Ended == nil {
			t.Fatalf("task %d: %+v", i, got[i])
		}
	}
	// Each end is an io.toolbus.task.done event on the session.
	done := map[string]bool{}
	for len(done) < 2 {
		var evt *bus.Event
		select {
		case evt = <-ev.C:
		case <-ctx.Done():
			t.Fatalf("task.done for %v only", done)
		}
		if evt.Type == bus.TypeTaskDone {
			var task bus.Task
			if err := evt.DataAs(&task); err != nil || task.Result == nil {
				t.Fatalf("task.done: %v %+v", err, task)
			}
			done[task.ID] = true
		}
	}
	if !done[id1] || !done[id2] {
		t.Fatalf("task.done for %v", done)
	}
}

// TestTaskCancel: cancel ends the task interrupted and stops its run at the
// worker.
func TestTaskCancel(t *testing.T) {
	e := newEnv(t, 1)
	stopped := make(chan struct{}, 1)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "forever", TimeoutMS: 200, Background: true, ConcurrencySafe: true},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				<-ctx.Done()
				stopped <- struct{}{}
				return nil, ctx.Err()
			})
	})
	e.waitLive("forever")
	const session = "task-cancel"
	id := backgrounded(t, e.call(t, session, []bus.Call{{ID: "c1", Name: "forever"}}).Results[0])
	ctx := testCtx(t)
	task, err := e.client.Tasks().Cancel(ctx, session, id)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != bus.StateInterrupted || task.Result == nil || task.Result.Error.Code != bus.CodeInterrupted {
		t.Fatalf("cancelled task: %+v", task)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the worker's run was not stopped")
	}
	// A second cancel keeps the first end; an unknown id is unknown_task.
	if again, err := e.client.Tasks().Cancel(ctx, session, id); err != nil || again.Result.Error.Code != bus.CodeInterrupted {
		t.Fatalf("second cancel: %v %+v", err, again)
	}
	if _, err := e.client.Tasks().Cancel(ctx, session, "nope"); !errors.Is(err, &bus.Error{Code: bus.CodeUnknownTask}) {
		t.Fatalf("unknown task: %v", err)
	}
}

// TestTaskIsolation: another session's task cannot be read, waited for,
// cancelled or have its output read: it is unknown there.
func TestTaskIsolation(t *testing.T) {
	e := newEnv(t, 1)
	g := newGate(t)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_iso", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true}, gated(g, nil))
	})
	e.waitLive("slow_iso")
	id := backgrounded(t, e.call(t, "owner", []bus.Call{{ID: "c1", Name: "slow_iso"}}).Results[0])
	ctx := testCtx(t)
	unknown := &bus.Error{Code: bus.CodeUnknownTask}
	if _, err := e.client.Tasks().Get(ctx, "intruder", id); !errors.Is(err, unknown) {
		t.Fatalf("get: %v", err)
	}
	if _, err := e.client.Tasks().Wait(ctx, "intruder", time.Second, id); !errors.Is(err, unknown) {
		t.Fatalf("wait: %v", err)
	}
	if _, err := e.client.Tasks().Cancel(ctx, "intruder", id); !errors.Is(err, unknown) {
		t.Fatalf("cancel: %v", err)
	}
	if _, _, err := e.client.Tasks().Output(ctx, "intruder", id); !errors.Is(err, unknown) {
		t.Fatalf("output: %v", err)
	}
	if list, err := e.client.Tasks().List(ctx, "intruder"); err != nil || len(list) != 0 {
		t.Fatalf("list: %v %+v", err, list)
	}
	if task, err := e.client.Tasks().Get(ctx, "owner", id); err != nil || task.State != bus.StateBackground {
		t.Fatalf("the owner's task after the attempts: %v %+v", err, task)
	}
}

// TestTaskBounds: past the session's bound, or the user's over sessions,
// the next call is refused limit_exceeded; a slot frees when a task ends.
func TestTaskBounds(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{Tasks: router.TasksConfig{MaxPerSession: 1, MaxPerUser: 2}})
	g := newGate(t)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_bound", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true}, gated(g, nil))
	})
	e.waitLive("slow_bound")
	user := []byte(`"alice"`)
	call := func(session, id string) bus.Result {
		return e.batch(t, session, bus.Batch{User: user, Calls: []bus.Call{{ID: id, Name: "slow_bound"}}}).Results[0]
	}
	first := backgrounded(t, call("b1", "c1"))
	r := call("b1", "c2") // the session's bound
	wantFailure(t, r, bus.StateError, bus.CodeLimitExceeded, textOf(r))
	if !strings.Contains(textOf(r), "session already has 1 background tasks") {
		t.Fatalf("refusal text: %q", textOf(r))
	}
	backgrounded(t, call("b2", "c1"))
	r = call("b3", "c1") // the user's bound, over sessions
	wantFailure(t, r, bus.StateError, bus.CodeLimitExceeded, textOf(r))
	if !strings.Contains(textOf(r), "user already has 2 background tasks") {
		t.Fatalf("refusal text: %q", textOf(r))
	}
	// Cancelling one frees its slot.
	if _, err := e.client.Tasks().Cancel(testCtx(t), "b1", first); err != nil {
		t.Fatal(err)
	}
	backgrounded(t, call("b1", "c3"))
}

// TestTaskSurvivesRouterRestart: the router that runs a task stops; another
// takes the task over (a read-only tool runs again) and the wait returns
// its result.
func TestTaskSurvivesRouterRestart(t *testing.T) {
	e := newEnv(t, 1)
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_restart", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				if runs.Add(1) == 1 {
					<-ctx.Done() // the first run outlives its router
					return nil, ctx.Err()
				}
				return textResult("second run"), nil
			})
	})
	e.waitLive("slow_restart")
	const session = "task-restart"
	id := backgrounded(t, e.call(t, session, []bus.Call{{ID: "c1", Name: "slow_restart"}}).Results[0])
	e.addRouter()
	e.waitLive("slow_restart")
	e.routers[0].Stop(t.Context())
	got, err := e.client.Tasks().Wait(testCtx(t), session, bound, id)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].State != bus.StateSuccess || textOf(*got[0].Result) != "second run" {
		t.Fatalf("task after the restart: %+v", got[0])
	}
}

// TestTaskSurvivesWorkerKill: the worker that runs a read-only task dies;
// the task runs again on another worker and ends with its result.
func TestTaskSurvivesWorkerKill(t *testing.T) {
	e := newEnv(t, 1)
	started := make(chan string, 2)
	crashing := e.connect(t)
	def := bus.ToolDef{Name: "slow_kill", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true}
	e.addWorkerOn(crashing, func(w *worker.Worker) {
		handle(t, w, def, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			started <- "crashing"
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	e.waitLive("slow_kill")
	const session = "task-kill"
	id := backgrounded(t, e.call(t, session, []bus.Call{{ID: "c1", Name: "slow_kill"}}).Results[0])
	<-started
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, def, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			return textResult("survivor"), nil
		})
	})
	crashing.Close() // the worker's process dies: no leaving, no reply
	got, err := e.client.Tasks().Wait(testCtx(t), session, bound+10*testHeartbeat, id)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].State != bus.StateSuccess || textOf(*got[0].Result) != "survivor" {
		t.Fatalf("task after the worker died: %+v", got[0])
	}
}

// TestTaskTools: the model follows a task with the built-in tools, called
// like any tool in a batch: task_output, list_tasks, wait_async_results
// and ToolStop, each on its own session's tasks only.
func TestTaskTools(t *testing.T) {
	e := newEnv(t, 1)
	g := newGate(t)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_tool", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true}, gated(g, nil))
		if err := builtin.RegisterTasks(w, e.connect(t), ""); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("slow_tool", builtin.TaskOutputName, builtin.WaitTasksName, builtin.StopTaskName, builtin.ListTasksName)
	const session = "task-tools"
	id1 := backgrounded(t, e.call(t, session, []bus.Call{{ID: "c1", Name: "slow_tool"}}).Results[0])
	id2 := backgrounded(t, e.call(t, session, []bus.Call{{ID: "c2", Name: "slow_tool"}}).Results[0])
	in := func(v string) json.RawMessage { return json.RawMessage(v) }

	r := e.call(t, session, []bus.Call{{ID: "o", Name: builtin.TaskOutputName, Input: in(`{"task_id":"` + id1 + `"}`)},
		{ID: "l", Name: builtin.ListTasksName}})
	if out := textOf(r.Results[0]); r.Results[0].State != bus.StateSuccess || !strings.Contains(out, "still running") {
		t.Fatalf("task_output: %+v", r.Results[0])
	}
	if out := textOf(r.Results[1]); !strings.Contains(out, id1) || !strings.Contains(out, id2) {
		t.Fatalf("list_tasks: %q", out)
	}
	// Another session's task is unknown to the tools as to the verbs.
	r = e.call(t, "other", []bus.Call{{ID: "s", Name: builtin.StopTaskName, Input: in(`{"task_id":"` + id1 + `"}`)}})
	if r.Results[0].State != bus.StateError || !strings.Contains(textOf(r.Results[0]), "TaskNotFoundError: The task "+id1+" does not exist.") {
		t.Fatalf("ToolStop on another session's task: %+v", r.Results[0])
	}
	r = e.call(t, session, []bus.Call{{ID: "s", Name: builtin.StopTaskName, Input: in(`{"task_id":"` + id2 + `"}`)}})
	if textOf(r.Results[0]) != "Task "+id2+" stopped successfully." {
		t.Fatalf("ToolStop: %+v", r.Results[0])
	}
	g.open()
	r = e.call(t, session, []bus.Call{{ID: "w", Name: builtin.WaitTasksName, Input: in(`{"task_ids":["` + id1 + `","` + id2 + `"],"timeout_seconds":30}`)}})
	if out := textOf(r.Results[0]); !strings.Contains(out, "done c1") || !strings.Contains(out, id2+" (tool 'slow_tool'): interrupted") {
		t.Fatalf("wait_async_results: %q", out)
	}
}

// TestTaskDurableSurvivesRouterRestart: a durable tool's task outlives the
// router that started it without running twice: the worker's result lands
// in the ledger, and the router that took the task over ends it with that.
func TestTaskDurableSurvivesRouterRestart(t *testing.T) {
	e := newEnv(t, 1)
	g := newGate(t)
	var runs atomic.Int32
	def := durableDef("durable_bg")
	def.TimeoutMS, def.Background = 200, true
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, def, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			<-g.ch
			return textResult("durable done"), nil
		})
	})
	e.waitLive("durable_bg")
	const session = "task-durable"
	id := backgrounded(t, e.call(t, session, []bus.Call{{ID: "c1", Name: "durable_bg"}}).Results[0])
	e.addRouter()
	e.waitLive("durable_bg")
	e.routers[0].Stop(t.Context())
	g.open()
	got, err := e.client.Tasks().Wait(testCtx(t), session, bound, id)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].State != bus.StateSuccess || textOf(*got[0].Result) != "durable done" || runs.Load() != 1 {
		t.Fatalf("task after the restart: %+v (runs %d)", got[0], runs.Load())
	}
}
