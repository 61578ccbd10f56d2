package builtin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// The background task tools (docs/protocol.md 11), under AgentScope's names
// where it has them; each acts on the calling session's tasks only.
const (
	TaskOutputName = "task_output"
	WaitTasksName  = "wait_async_results"
	StopTaskName   = "ToolStop"
	ListTasksName  = "list_tasks"
)

// TaskIDIn is the input of task_output and ToolStop.
type TaskIDIn struct {
	TaskID string `json:"task_id" jsonschema:"description=The task id of the background tool call (the id= in its result)."`
}

// WaitTasksIn is the input of wait_async_results (AgentScope Java's).
type WaitTasksIn struct {
	TaskIDs        []string `json:"task_ids,omitempty" jsonschema:"description=The task ids to wait for; all running tasks of this session when empty."`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty" jsonschema:"description=How long to wait at most in seconds (default 60; at most 120)."`
	WaitAll        *bool    `json:"wait_all,omitempty" jsonschema:"description=Wait until all of them finished (default true); false returns when one did."`
}

// ListTasksIn is the input of list_tasks.
type ListTasksIn struct{}

// RegisterTasks adds the background task tools to w: they ask the routers
// on nc (subject prefix prefix, "" for the default) through the task verbs.
func RegisterTasks(w *worker.Worker, nc *nats.Conn, prefix string) error {
	c := client.New(nc, client.Config{Source: "toolbus/builtin", Prefix: prefix})
	return errors.Join(
		worker.Register(w, bus.ToolDef{Name: TaskOutputName, ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 30000,
			Description: "Read the output so far of a tool call running in the background, and its result once it finished."},
			func(ctx context.Context, call *worker.Call, in TaskIDIn) (string, error) {
				t, out, err := c.Tasks().Output(ctx, call.SessionID, in.TaskID)
				if err != nil {
					return "", taskErr(err)
				}
				return taskText(t, out), nil
			}),
		worker.Register(w, bus.ToolDef{Name: WaitTasksName, ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 130000,
			Description: "Wait for tool calls running in the background to finish, and return their results. Waits at most timeout_seconds."},
			func(ctx context.Context, call *worker.Call, in WaitTasksIn) (string, error) {
				return waitTasks(ctx, c, call.SessionID, in)
			}),
		worker.Register(w, bus.ToolDef{Name: StopTaskName, ConcurrencySafe: true, TimeoutMS: 30000, Permission: bus.PermissionAllow,
			Description: "Stop a background tool execution by its task id. Use this when you want to cancel a previously offloaded tool that is still running in the background."},
			func(ctx context.Context, call *worker.Call, in TaskIDIn) (string, error) {
				t, err := c.Tasks().Cancel(ctx, call.SessionID, in.TaskID)
				if err != nil {
					return "", taskErr(err)
				}
				if t.Result != nil && t.Result.Error != nil && t.Result.Error.Code == bus.CodeInterrupted {
					return fmt.Sprintf("Task %s stopped successfully.", in.TaskID), nil
				}
				return fmt.Sprintf("Task %s had already finished (%s).", in.TaskID, t.State), nil
			}),
		worker.Register(w, bus.ToolDef{Name: ListTasksName, ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 30000,
			Description: "List this session's tool calls that went on in the background: id, tool, state."},
			func(ctx context.Context, call *worker.Call, _ ListTasksIn) (string, error) {
				ts, err := c.Tasks().List(ctx, call.SessionID)
				if err != nil {
					return "", taskErr(err)
				}
				if len(ts) == 0 {
					return "No background tasks.", nil
				}
				var sb strings.Builder
				for _, t := range ts {
					fmt.Fprintf(&sb, "%s\t%s\t%s\n", t.ID, t.Tool, t.State)
				}
				return sb.String(), nil
			}),
	)
}

// waitTasks runs wait_async_results.
func waitTasks(ctx context.Context, c *client.Client, session string, in WaitTasksIn) (string, error) {
	timeout := 60 * time.Second
	if in.TimeoutSeconds > 0 {
		timeout = min(time.Duration(in.TimeoutSeconds)*time.Second, bus.MaxTaskWaitMS*time.Millisecond)
	}
	ids := in.TaskIDs
	if len(ids) == 0 {
		ts, err := c.Tasks().List(ctx, session)
		if err != nil {
			return "", taskErr(err)
		}
		for _, t := range ts {
			if t.Running() && len(ids) < bus.MaxTaskIDs {
				ids = append(ids, t.ID)
			}
		}
		if len(ids) == 0 {
			return "No background tasks are running.", nil
		}
	}
	r, err := c.Tasks().Query(ctx, session, bus.TaskQuery{Op: bus.TaskWait, IDs: ids, TimeoutMS: timeout.Milliseconds(),
		Any: in.WaitAll != nil && !*in.WaitAll})
	if err != nil {
		return "", taskErr(err)
	}
	texts := make([]string, len(r.Tasks))
	for i, t := range r.Tasks {
		texts[i] = taskText(t, nil)
	}
	return strings.Join(texts, "\n\n"), nil
}

// taskText shows a task to the model.
func taskText(t bus.Task, out []bus.Block) string {
	s := fmt.Sprintf("Task %s (tool '%s'): %s", t.ID, t.Tool, t.State)
	if t.Running() {
		s += ", still running"
	}
	s += "."
	if len(out) > 0 {
		s += "\nOutput so far:\n" + blocksText(out)
	}
	if t.Result != nil {
		s += "\nResult:\n" + blocksText(t.Result.Output)
	}
	return s
}

func blocksText(bs []bus.Block) string {
	var parts []string
	for _, b := range bs {
		switch {
		case b.Type == bus.BlockText:
			parts = append(parts, b.Text)
		case b.URL != "":
			parts = append(parts, fmt.Sprintf("[%s %s]", b.MediaType, b.URL))
		default:
			parts = append(parts, fmt.Sprintf("[%s data]", b.MediaType))
		}
	}
	return strings.Join(parts, "\n")
}

// taskErr is the tool error of a refused verb: its message as the model
// reads it.
func taskErr(err error) error {
	if be, ok := errors.AsType[*bus.Error](err); ok {
		return errors.New(be.Message)
	}
	return err
}
