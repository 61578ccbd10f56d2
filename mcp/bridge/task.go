package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// A tool whose server says taskSupport "required" runs as an MCP task:
// tools/call with params.task, tasks/get polled (each status a progress
// event), then tasks/result; cancelling the bus call sends tasks/cancel.

// taskPoll is how often tasks/get is sent when the server names no interval.
const taskPoll = 500 * time.Millisecond

// callTask runs req as an MCP task on cl.
func (cr *caller) callTask(ctx context.Context, cl *mcpclient.Client, req mcp.CallToolRequest, c *worker.Call) (*mcp.CallToolResult, error) {
	req.Params.Task = &mcp.TaskParams{}
	// mcp-go's CallTool cannot read a CreateTaskResult, so tools/call goes
	// through the transport; not cut short by cancellation, so the task
	// made is known and can be cancelled.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cr.s.setupTimeout())
	resp, err := cl.GetTransport().SendRequest(cctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId("toolbus-task-" + nuid.Next()), Method: string(mcp.MethodToolsCall), Params: req.Params})
	cancel()
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("tools/call as a task: %s (%d)", resp.Error.Message, resp.Error.Code)
	}
	var created mcp.CreateTaskResult
	if err := json.Unmarshal(resp.Result, &created); err != nil || created.Task.TaskId == "" {
		// A server that answered at once after all.
		if res, perr := mcp.ParseCallToolResult(&resp.Result); perr == nil {
			return res, nil
		}
		return nil, fmt.Errorf("tools/call as a task: no task in the answer: %s", cut(string(resp.Result), 200))
	}
	id := created.Task.TaskId
	done := false
	defer func() {
		if !done {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if _, err := cl.CancelTask(cctx, mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: id}}); err != nil {
				cr.log.Warn("bridge: tasks/cancel", "task", id, "err", err)
			}
			cancel()
		}
	}()
	task, last := created.Task, ""
	for !task.Status.IsTerminal() && task.Status != mcp.TaskStatusInputRequired {
		if s := string(task.Status) + ": " + task.StatusMessage; s != last && task.StatusMessage != "" {
			last = s
			_ = c.Progress(bus.Text("task " + s)...)
		}
		wait := taskPoll
		if task.PollInterval != nil && *task.PollInterval > 0 {
			wait = min(time.Duration(*task.PollInterval)*time.Millisecond, 30*time.Second)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		got, err := cl.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}})
		if err != nil {
			return nil, fmt.Errorf("tasks/get: %w", err)
		}
		task = got.Task
	}
	if task.Status == mcp.TaskStatusCancelled {
		done = true
		return nil, errors.New("the MCP server cancelled the task")
	}
	res, err := cl.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: id}})
	if err != nil {
		return nil, fmt.Errorf("tasks/result: %w", err)
	}
	done = true
	return &mcp.CallToolResult{Content: res.Content, StructuredContent: res.StructuredContent,
		IsError: res.IsError || task.Status == mcp.TaskStatusFailed && len(res.Content) == 0}, nil
}
