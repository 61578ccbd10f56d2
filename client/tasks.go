package client

import (
	"context"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// Tasks is the agent's handle on a session's background tasks
// (docs/protocol.md 5.10): one verb each on P.tasks.<session>, through the
// Client it came from. Client.Tasks returns it; it is a value, cheap to
// make and safe for concurrent use.
type Tasks struct{ c *Client }

// Tasks returns the Client's handle on background tasks.
func (c *Client) Tasks() Tasks { return Tasks{c} }

// Query sends one task verb for session to P.tasks.<session>
// (docs/protocol.md 5.10) and returns the router's reply; a refusal
// (unknown_task, bad_request) is a *bus.Error. A wait's reply comes when
// the tasks ended or q.TimeoutMS passed.
func (t Tasks) Query(ctx context.Context, session string, q bus.TaskQuery) (*bus.TaskReply, error) {
	c := t.c
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

// Get returns session's task id.
func (t Tasks) Get(ctx context.Context, session, id string) (bus.Task, error) {
	r, err := t.Query(ctx, session, bus.TaskQuery{Op: bus.TaskGet, IDs: []string{id}})
	if err != nil || len(r.Tasks) == 0 {
		return bus.Task{}, err
	}
	return r.Tasks[0], nil
}

// List lists session's tasks, newest first.
func (t Tasks) List(ctx context.Context, session string) ([]bus.Task, error) {
	r, err := t.Query(ctx, session, bus.TaskQuery{Op: bus.TaskList})
	if err != nil {
		return nil, err
	}
	return r.Tasks, nil
}

// Wait waits until session's tasks ids all ended (at most timeout,
// bus.MaxTaskWaitMS), and returns them as they are then.
func (t Tasks) Wait(ctx context.Context, session string, timeout time.Duration, ids ...string) ([]bus.Task, error) {
	r, err := t.Query(ctx, session, bus.TaskQuery{Op: bus.TaskWait, IDs: ids, TimeoutMS: max(timeout.Milliseconds(), 1)})
	if err != nil {
		return nil, err
	}
	return r.Tasks, nil
}

// Cancel ends session's running task id as interrupted and stops its
// run; a task that ended keeps its end.
func (t Tasks) Cancel(ctx context.Context, session, id string) (bus.Task, error) {
	r, err := t.Query(ctx, session, bus.TaskQuery{Op: bus.TaskCancel, IDs: []string{id}})
	if err != nil || len(r.Tasks) == 0 {
		return bus.Task{}, err
	}
	return r.Tasks[0], nil
}

// Output returns session's task id with its progress output so far.
func (t Tasks) Output(ctx context.Context, session, id string) (bus.Task, []bus.Block, error) {
	r, err := t.Query(ctx, session, bus.TaskQuery{Op: bus.TaskOutput, IDs: []string{id}})
	if err != nil || len(r.Tasks) == 0 {
		return bus.Task{}, nil, err
	}
	return r.Tasks[0], r.Output, nil
}
