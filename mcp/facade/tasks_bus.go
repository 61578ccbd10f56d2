package facade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
)

// An MCP task whose call goes on in the background (docs/protocol.md
// 5.10: a result in state "background" with a task handle) follows that
// bus task to its end: its record names the bus task (BusTask), tasks/get
// on any process follows it (P.tasks.<session>, wait), and tasks/cancel
// cancels it instead of the batch, which ended at the handoff.

// busTasks is what following bus tasks needs (client.Tasks).
type busTasks interface {
	Get(ctx context.Context, session, id string) (bus.Task, error)
	Wait(ctx context.Context, session string, timeout time.Duration, ids ...string) ([]bus.Task, error)
	Cancel(ctx context.Context, session, id string) (bus.Task, error)
	Output(ctx context.Context, session, id string) (bus.Task, []bus.Block, error)
}

var _ busTasks = client.Tasks{}

// busWaitEach bounds one wait verb (a router handler held meanwhile);
// busRetryMax bounds the pause after a wait that got no answer.
const (
	busWaitEach = 60 * time.Second
	busRetryMax = 5 * time.Second
)

// awaitBusTask waits until session's bus task id (or ctx) ends and
// returns its result. A wait no router answered is asked again (with a
// growing pause); a refusal ends it, and so does a task that is not the
// call callID of batch replyID.
func awaitBusTask(ctx context.Context, bt busTasks, session, id, replyID, callID string) (*bus.Result, error) {
	pause := 100 * time.Millisecond
	for {
		wait := busWaitEach
		if d, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(d)), time.Millisecond)
		}
		ts, err := bt.Wait(ctx, session, wait, id)
		var be *bus.Error
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &be) && (be.Code == bus.CodeUnknownTask || be.Code == bus.CodeBadRequest):
			return nil, fmt.Errorf("facade: bus task %s: %w", id, err)
		case err != nil:
			if err := bus.Sleep(ctx, pause); err != nil {
				return nil, err
			}
			pause = min(2*pause, busRetryMax)
			continue
		case len(ts) == 1 && (ts[0].ReplyID != replyID || ts[0].CallID != callID):
			return nil, fmt.Errorf("facade: bus task %s is not the task's call %s", id, callID)
		case len(ts) == 1 && !ts[0].Running():
			if ts[0].Result == nil {
				return nil, fmt.Errorf("facade: bus task %s ended %s without a result", id, ts[0].State)
			}
			return ts[0].Result, nil
		}
		pause = 100 * time.Millisecond
	}
}

// checkBusTask checks that bus task id is task r's call before the
// record names it (three tries): a handle naming another call of the
// session is never followed nor cancelled.
func checkBusTask(ctx context.Context, bt busTasks, r *taskRecord, id string) error {
	var err error
	for try := range 3 {
		if try > 0 && bus.Sleep(ctx, time.Duration(try)*200*time.Millisecond) != nil {
			return ctx.Err()
		}
		var bt1 bus.Task
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		bt1, err = bt.Get(cctx, r.Session, id)
		cancel()
		var be *bus.Error
		switch {
		case err == nil && (bt1.ReplyID != r.ReplyID || bt1.CallID != r.CallID):
			return fmt.Errorf("facade: bus task %s is not the task's call %s", id, r.CallID)
		case err == nil:
			return nil
		case errors.As(err, &be):
			return fmt.Errorf("facade: bus task %s: %w", id, err)
		}
	}
	return fmt.Errorf("facade: bus task %s: %w", id, err)
}

// HandleMetaKey is the _meta member of a tools/call result whose call went
// on as a bus task: the handle ({"id", "state", "subject"}, docs/protocol.md
// 5.10), for hosts that follow it on the bus.
const HandleMetaKey = "io.toolbus/task"

// handleOf returns the handle toMCP put into res.
func handleOf(res *mcp.CallToolResult) (bus.TaskHandle, bool) {
	if res == nil || res.Meta == nil {
		return bus.TaskHandle{}, false
	}
	h, ok := res.Meta.AdditionalFields[HandleMetaKey].(bus.TaskHandle)
	return h, ok
}

// handleWithoutSchema keeps a handle result of a tool listed with an
// outputSchema isError, since hosts check only successful results against
// the schema (docs/mcp.md, F1); its first text says the call did not fail.
func handleWithoutSchema(res *mcp.CallToolResult) bool {
	h, ok := handleOf(res)
	if !ok || res.StructuredContent != nil {
		return false
	}
	res.IsError = true
	note := fmt.Sprintf("Not a failure: the call goes on in the background as task %s (this result is marked as an error "+
		"only because a task handle is not the structured content the tool's output schema describes).", h.ID)
	res.Content = append([]mcp.Content{mcp.NewTextContent(note)}, res.Content...)
	return true
}

// maxStatusOutput bounds the output so far that tasks/get shows in a
// task's status message (its last bytes). A bus task's output read serves
// the tasks/get of outputEvery (the output verb reads the session's
// stored events: hosts polling every 500 ms must not each cost one);
// maxOutputCache bounds the reads a process keeps.
const (
	maxStatusOutput = 1024
	outputEvery     = 2 * time.Second
	maxOutputCache  = 1000
)

type outputRead struct {
	at   time.Time
	text string
}

// withOutput returns r's status message with the output so far of its
// bus task (readOutput); r's message alone when there is none.
func (t *taskRunners) withOutput(ctx context.Context, r *taskRecord) string {
	if t.tasks == nil || r.BusTask == "" || r.Status.IsTerminal() {
		return r.Message
	}
	key := r.Session + " " + r.BusTask
	t.mu.Lock()
	last, ok := t.outputs[key]
	t.mu.Unlock()
	if !ok || time.Since(last.at) >= outputEvery {
		last = outputRead{at: time.Now(), text: t.readOutput(ctx, r)}
		t.mu.Lock()
		if len(t.outputs) >= maxOutputCache {
			clear(t.outputs)
		}
		if t.outputs == nil {
			t.outputs = map[string]outputRead{}
		}
		t.outputs[key] = last
		t.mu.Unlock()
	}
	if last.text == "" {
		return r.Message
	}
	return r.Message + "; output so far: " + last.text
}

// readOutput reads the last maxStatusOutput bytes of the text of r's bus
// task's output so far; "" when there is none, the bus task is not r's
// call or the verb fails.
func (t *taskRunners) readOutput(ctx context.Context, r *taskRecord) string {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tk, out, err := t.tasks.Output(cctx, r.Session, r.BusTask)
	if err != nil || tk.ReplyID != r.ReplyID || tk.CallID != r.CallID {
		return ""
	}
	var text []string
	for _, b := range out {
		if b.Type == bus.BlockText && b.Text != "" {
			text = append(text, b.Text)
		}
	}
	return tail(strings.Join(text, "\n"), maxStatusOutput)
}

// tail is the last at most n bytes of s, marked with "…" when cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + offload.Suffix(s, n)
}

func backgrounded(r *bus.Result) (bus.TaskHandle, bool) {
	if r == nil || r.State != bus.StateBackground || r.Task == nil || !bus.ValidID(r.Task.ID) {
		return bus.TaskHandle{}, false
	}
	return *r.Task, true
}

// followBus records that task r's call goes on as bus task id and waits
// for its end (within the record's TTL). live is false when the record
// had ended already (a tasks/cancel before the bus task was recorded: it
// is cancelled here) or this process has no bus tasks to follow.
func (t *taskRunners) followBus(ctx context.Context, r *taskRecord, id string) (res *mcp.CallToolResult, live bool, err error) {
	if t.tasks == nil {
		return nil, false, nil
	}
	if r.BusTask != id {
		if err := checkBusTask(ctx, t.tasks, r, id); err != nil {
			return nil, true, err
		}
		rec, uerr := t.store.updateTask(ctx, r.Session, r.User, r.ID, func(r *taskRecord) {
			r.BusTask = id
			r.Message = fmt.Sprintf("running in the background as bus task %s (past the tool's timeout)", id)
		})
		if uerr == nil && rec.Status.IsTerminal() {
			t.cancelBus(ctx, r.Session, id)
			return nil, false, nil
		}
		if uerr == nil {
			t.notify(rec)
		}
	}
	wctx, cancel := context.WithDeadline(ctx, r.expires())
	defer cancel()
	out, err := awaitBusTask(wctx, t.tasks, r.Session, id, r.ReplyID, r.CallID)
	if err != nil {
		return nil, true, err
	}
	return toMCP(*out), true, nil
}

// cancelBus cancels session's bus task id (a failure is logged: it then
// ends at its own deadline).
func (t *taskRunners) cancelBus(ctx context.Context, session, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := t.tasks.Cancel(ctx, session, id); err != nil {
		t.log.Warn("facade: bus task not cancelled", "task", id, "err", err)
	}
}
