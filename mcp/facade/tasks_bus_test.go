package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// bgWorker starts a worker with two background tools whose calls outlive
// their 300 ms timeout: bg_done reports the progress "bg step 1", then ends
// "bg done" when release yields (one call per value),
// bg_stop only when its call is cancelled (then stopped receives).
func bgWorker(t *testing.T, p *pair, release <-chan struct{}, stopped chan<- string) {
	t.Helper()
	_, err := p.d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		if err := worker.Register(w, bus.ToolDef{Name: "bg_done", Description: "Ends when released.", Background: true, TimeoutMS: 300},
			func(ctx context.Context, c *worker.Call, _ struct{}) (string, error) {
				if err := c.Progress(bus.Text("bg step 1")...); err != nil {
					return "", err
				}
				select {
				case <-release:
					return "bg done", nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}); err != nil {
			return err
		}
		return worker.Register(w, bus.ToolDef{Name: "bg_stop", Description: "Ends when cancelled.", Background: true, TimeoutMS: 300},
			func(ctx context.Context, c *worker.Call, _ struct{}) (string, error) {
				<-ctx.Done()
				stopped <- c.ID
				return "", ctx.Err()
			})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.d.WaitLive(t.Context(), "bg_done", "bg_stop"); err != nil {
		t.Fatal(err)
	}
}

// releaseOne ends one bg_done call.
func releaseOne(t *testing.T, release chan<- struct{}) {
	t.Helper()
	select {
	case release <- struct{}{}:
	case <-time.After(bound):
		t.Fatal("no bg_done call to release")
	}
}

// busTaskOf waits until task id's record names its bus task (its call
// went past its timeout) and returns the bus task's id; tasks/get says
// working meanwhile on both processes.
func busTaskOf(t *testing.T, p *pair, s, id string) string {
	t.Helper()
	var busID string
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		r, err := p.backend[0].kv.getTask(t.Context(), s, "alice", id)
		if err != nil {
			return err
		}
		if r.Status != mcp.TaskStatusWorking {
			return fmt.Errorf("record %s before its bus task ended", r.Status)
		}
		busID = r.BusTask
		if busID == "" {
			return fmt.Errorf("no bus task yet")
		}
		return nil
	})
	for _, b := range []string{"A", "B"} {
		if tk := p.task(t, b, s, "tasks/get", id); tk.Status != mcp.TaskStatusWorking || !strings.Contains(tk.StatusMessage, busID) {
			t.Fatalf("tasks/get on %s while the bus task runs: %+v", b, tk)
		}
	}
	return busID
}

// TestTaskFollowsBusTask: an MCP task whose call goes on as a bus task
// (a background tool past its timeout) stays working until the bus task
// ends, then completes with the tool's final output, on either process;
// tasks/cancel on the other process cancels the bus task and stops the
// tool's run.
func TestTaskFollowsBusTask(t *testing.T) {
	p := newPair(t, false)
	release, stopped := make(chan struct{}), make(chan string, 1)
	bgWorker(t, p, release, stopped)

	const s = "mt-bus"
	id := p.startTask(t, "A", s, "bg_done")
	busID := busTaskOf(t, p, s, id)
	if bt, err := p.bus.Tasks().Get(t.Context(), s, busID); err != nil || !bt.Running() || bt.Tool != "bg_done" {
		t.Fatalf("the bus task: %+v %v", bt, err)
	}
	// Its output so far in tasks/get's status message, on either process
	// (bounded polling: progress is stored asynchronously).
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if tk := p.task(t, "B", s, "tasks/get", id); !strings.HasSuffix(tk.StatusMessage, "; output so far: bg step 1") {
			return fmt.Errorf("status message %q", tk.StatusMessage)
		}
		return nil
	})
	releaseOne(t, release)
	res, rerr := p.rpc(t, "B", s, "alice", "tasks/result", map[string]any{"taskId": id}, false)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if text, isErr := resultText(t, res); isErr || text != "bg done" {
		t.Fatalf("tasks/result on B: %s", res)
	}
	// 2026-07-28: the result inline in tasks/get, on the process that ran it.
	res, rerr = p.rpc(t, "A", s, "alice", "tasks/get", map[string]any{"taskId": id}, true)
	var got struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	}
	if rerr != nil || json.Unmarshal(res, &got) != nil || got.Status != string(mcp.TaskStatusCompleted) {
		t.Fatalf("tasks/get on A after the end: %s %+v", res, rerr)
	}
	if text, isErr := resultText(t, got.Result); isErr || text != "bg done" {
		t.Fatalf("tasks/get's inline result: %s", got.Result)
	}

	// A plain (not task-augmented) tools/call past the timeout: the
	// handle is a normal result, its text naming the task and the tools
	// that read it, the handle in _meta; the bus task goes on.
	res, rerr = p.rpc(t, "A", s, "alice", "tools/call", map[string]any{"name": "bg_done", "arguments": map[string]any{}}, true)
	var plain struct {
		Meta map[string]bus.TaskHandle `json:"_meta"`
	}
	if rerr != nil || json.Unmarshal(res, &plain) != nil {
		t.Fatalf("plain call: %s %+v", res, rerr)
	}
	h := plain.Meta[HandleMetaKey]
	if text, isErr := resultText(t, res); isErr || h.ID == "" || !strings.Contains(text, "(id="+h.ID+")") || !strings.Contains(text, "task_output") {
		t.Fatalf("plain call's handle: %s", res)
	}
	releaseOne(t, release)
	if ts, err := p.bus.Tasks().Wait(t.Context(), s, bound, h.ID); err != nil || len(ts) != 1 || ts[0].State != bus.StateSuccess {
		t.Fatalf("the plain call's bus task: %+v %v", ts, err)
	}

	// Cancelled on B while its bus task runs: the bus task ends
	// interrupted and the tool's run is stopped.
	const s2 = "mt-bus-cancel"
	id = p.startTask(t, "A", s2, "bg_stop")
	busID = busTaskOf(t, p, s2, id)
	if tk := p.task(t, "B", s2, "tasks/cancel", id); tk.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel on B: %+v", tk)
	}
	testkit.Recv(t, stopped, bound, "the tool's run stopped")
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		bt, err := p.bus.Tasks().Get(t.Context(), s2, busID)
		if err != nil || bt.Running() || bt.Result == nil || bt.Result.State != bus.StateInterrupted {
			return fmt.Errorf("the bus task after tasks/cancel: %+v %v", bt, err)
		}
		return nil
	})
	if tk := p.task(t, "A", s2, "tasks/get", id); tk.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/get on A after the cancel: %+v", tk)
	}
}

// TestTaskFollowsBusTaskElsewhere: a facade process that closes while its
// task follows a bus task leaves it running, and the next process
// completes the MCP task; a process that did not run a task and finds its
// call's result to be a background handle (the record naming no bus task
// yet) follows that bus task too.
func TestTaskFollowsBusTaskElsewhere(t *testing.T) {
	p := newPair(t, false)
	release := make(chan struct{})
	bgWorker(t, p, release, make(chan string, 1))

	const s = "mt-bus-restart"
	id := p.startTask(t, "A", s, "bg_done")
	busID := busTaskOf(t, p, s, id)
	p.f.Drain(t.Context())
	p.mu.Lock()
	p.backend[0] = p.newFacade(t)
	p.mu.Unlock()
	if bt, err := p.bus.Tasks().Get(t.Context(), s, busID); err != nil || !bt.Running() {
		t.Fatalf("the bus task after A closed: %+v %v", bt, err)
	}
	if tk := p.task(t, "A", s, "tasks/get", id); tk.Status != mcp.TaskStatusWorking {
		t.Fatalf("tasks/get on the new A: %+v", tk)
	}
	releaseOne(t, release)
	res, rerr := p.rpc(t, "A", s, "alice", "tasks/result", map[string]any{"taskId": id}, false)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if text, isErr := resultText(t, res); isErr || text != "bg done" {
		t.Fatalf("tasks/result on the new A: %s", res)
	}

	// A record whose call was sent by a process that stopped before it
	// named the bus task: B learns the handle from the call's result.
	const s2 = "mt-bus-handle"
	now := time.Now()
	r := &taskRecord{ID: newID(), Session: s2, User: "alice", Tool: "bg_done", CallID: "mcp-" + newID()[:20],
		ReplyID: client.NewReplyID(), Status: mcp.TaskStatusWorking, Created: now, Updated: now, TTLMS: 60000}
	if err := p.backend[1].kv.createTask(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	reply, err := p.bus.Call(t.Context(), s2, bus.Batch{Calls: []bus.Call{{ID: r.CallID, Name: "bg_done", Input: json.RawMessage(`{}`)}}},
		client.WithReplyID(r.ReplyID))
	if err != nil || len(reply.Results) != 1 || reply.Results[0].Task == nil {
		t.Fatalf("the call: %+v %v", reply, err)
	}
	busID = reply.Results[0].Task.ID
	if tk := p.task(t, "B", s2, "tasks/get", r.ID); tk.Status != mcp.TaskStatusWorking {
		t.Fatalf("tasks/get on B: %+v", tk)
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		got, err := p.backend[1].kv.getTask(t.Context(), s2, "alice", r.ID)
		if err != nil || got.BusTask != busID || got.Status != mcp.TaskStatusWorking {
			return fmt.Errorf("the record: %+v %v", got, err)
		}
		return nil
	})
	releaseOne(t, release)
	res, rerr = p.rpc(t, "B", s2, "alice", "tasks/result", map[string]any{"taskId": r.ID}, false)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if text, isErr := resultText(t, res); isErr || text != "bg done" {
		t.Fatalf("tasks/result on B: %s", res)
	}
}
