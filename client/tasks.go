package client

import (
	"context"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// TaskQuery sends one task verb for session to P.tasks.<session>
// (docs/protocol.md 5.10) and returns the router's reply; a refusal
// (unknown_task, bad_request) is a *bus.Error. A wait's reply comes when
// the tasks ended or q.TimeoutMS passed.
func (c *Client) TaskQuery(ctx context.Context, session string, q bus.TaskQuery) (*bus.TaskReply, error) {
	e, err := c.rq.event(bus.TypeTaskQuery, session, q)
	if err != nil {
		return nil, err
	}
	var r bus.TaskReply
	wait := 10*time.Second + time.Duration(min(max(q.TimeoutMS, 0), bus.MaxTaskWaitMS))*time.Millisecond
	if err := c.rq.request(ctx, c.subj.Tasks(session), e, bus.TypeTaskReply, &r, wait); err != nil {
		return nil, err
	}
	return &r, nil
}

// Task returns session's task id.
func (c *Client) Task(ctx context.Context, session, id string) (bus.Task, error) {
	r, err := c.TaskQuery(ctx, session, bus.TaskQuery{Op: bus.TaskGet, IDs: []string{id}})
	if err != nil || len(r.Tasks) == 0 {
		return bus.Task{}, err
	}
	return r.Tasks[0], nil
}

// Tasks lists session's tasks, newest first.
func (c *Client) Tasks(ctx context.Context, session string) ([]bus.Task, error) {
	r, err := c.TaskQuery(ctx, session, bus.TaskQuery{Op: bus.TaskList})
	if err != nil {
		return nil, err
	}
	return r.Tasks, nil
}

// WaitTasks waits until session's tasks ids all ended (at most timeout,
// bus.MaxTaskWaitMS), and returns them as they are then.
func (c *Client) WaitTasks(ctx context.Context, session string, timeout time.Duration, ids ...string) ([]bus.Task, error) {
	r, err := c.TaskQuery(ctx, session, bus.TaskQuery{Op: bus.TaskWait, IDs: ids, TimeoutMS: max(timeout.Milliseconds(), 1)})
	if err != nil {
		return nil, err
	}
	return r.Tasks, nil
}

// CancelTask ends session's running task id as interrupted and stops its
// run; a task that ended keeps its end.
func (c *Client) CancelTask(ctx context.Context, session, id string) (bus.Task, error) {
	r, err := c.TaskQuery(ctx, session, bus.TaskQuery{Op: bus.TaskCancel, IDs: []string{id}})
	if err != nil || len(r.Tasks) == 0 {
		return bus.Task{}, err
	}
	return r.Tasks[0], nil
}

// TaskOutput returns session's task id with its progress output so far.
func (c *Client) TaskOutput(ctx context.Context, session, id string) (bus.Task, []bus.Block, error) {
	r, err := c.TaskQuery(ctx, session, bus.TaskQuery{Op: bus.TaskOutput, IDs: []string{id}})
	if err != nil || len(r.Tasks) == 0 {
		return bus.Task{}, nil, err
	}
	return r.Tasks[0], r.Output, nil
}
