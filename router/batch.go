package router

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/schemas"
)

// batch is one model turn in flight on this router.
type batch struct {
	r        *Router
	ev       *bus.Event
	session  string
	replyID  string
	data     bus.Batch
	req      *groups.Request
	deadline time.Time // from expirytime; zero when absent
	calls    []*callState
	ctx      context.Context
	cancel   context.CancelFunc

	mu sync.Mutex // guards callState.result/cancel/interrupted of calls
}

// callState is one call of a batch.
type callState struct {
	call   bus.Call
	target groups.Resolved // what the call runs
	input  json.RawMessage // the validated input object
	early  *bus.Result     // the result when the call cannot run
	result *bus.Result     // set once, when the call finishes
	cancel context.CancelFunc
}

// safe reports whether the call may run beside others: unknown and failed
// calls count as safe, reset_tools never is.
func (c *callState) safe() bool {
	switch {
	case c.early != nil, c.target.External != nil:
		return true
	case c.target.Reset:
		return false
	}
	return c.target.Tool.Def.ConcurrencySafe
}

func (r *Router) onBatch(m *nats.Msg) {
	b, err := r.newBatch(m)
	if err != nil {
		r.reject(m, err)
		return
	}
	key := b.session + "/" + b.replyID
	r.mu.Lock()
	r.batches[key] = b
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.batches[key] == b {
			delete(r.batches, key)
		}
		r.mu.Unlock()
		b.cancel()
	}()
	b.run()
	reply := bus.Reply{Results: make([]bus.Result, 0, len(b.calls)), Parked: []bus.Parked{}}
	for _, c := range b.calls {
		reply.Results = append(reply.Results, *c.result)
	}
	r.publishEvent(b, bus.TypeBatchDone, "", bus.BatchDone{Results: reply.Results})
	if m.Reply != "" {
		e, err := r.event(b, bus.TypeCallReply, "", reply)
		if err == nil {
			err = bus.Publish(r.nc, m.Reply, e)
		}
		if err != nil {
			r.log.Warn("router: reply failed", "session", b.session, "reply", b.replyID, "err", err)
		}
	}
}

// newBatch decodes and checks a batch; errors are bad_event or bad_request.
func (r *Router) newBatch(m *nats.Msg) (*batch, error) {
	e, err := r.decode(m, "call", bus.TypeCallBatch)
	if err != nil {
		return nil, err
	}
	if !bus.ValidID(e.ID) {
		return nil, bus.Errorf(bus.CodeBadEvent, "id (the reply id) %q must match ^[A-Za-z0-9_-]{1,128}$", e.ID)
	}
	b := &batch{r: r, ev: e, session: e.SessionID, replyID: e.ID}
	if b.deadline, err = e.Expiry(); err != nil {
		return nil, err
	}
	if err := e.DataAs(&b.data); err != nil {
		return nil, err
	}
	if b.req, err = groups.CheckRequest(b.data.Request); err != nil {
		return nil, err
	}
	n := len(b.data.Calls)
	if n == 0 {
		return nil, bus.Errorf(bus.CodeBadRequest, "the batch has no calls")
	}
	if n > bus.MaxCalls {
		return nil, bus.Errorf(bus.CodeBadRequest, "the batch has %d calls; at most %d are allowed", n, bus.MaxCalls)
	}
	seen := make(map[string]struct{}, n)
	b.calls = make([]*callState, n)
	for i, c := range b.data.Calls {
		if !bus.ValidID(c.ID) {
			return nil, bus.Errorf(bus.CodeBadEvent, "call id %q must match ^[A-Za-z0-9_-]{1,128}$", c.ID)
		}
		if _, dup := seen[c.ID]; dup {
			return nil, bus.Errorf(bus.CodeBadRequest, "call id %q appears twice in the batch", c.ID)
		}
		seen[c.ID] = struct{}{}
		b.calls[i] = &callState{call: c}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// run executes the batch: calls are resolved and validated, then split into
// maximal runs of concurrency-safe calls and single unsafe calls; runs go
// one after another, the calls of a safe run in parallel.
//
// A reset_tools call changes what later calls of the batch resolve to, so
// they are resolved again after it.
func (b *batch) run() {
	b.resolveFrom(0)
	for i := 0; i < len(b.calls); {
		j := i + 1
		if b.calls[i].safe() {
			for j < len(b.calls) && b.calls[j].safe() {
				j++
			}
		}
		b.runCalls(b.calls[i:j])
		if b.calls[i].target.Reset && b.calls[i].early == nil {
			b.resolveFrom(j)
		}
		i = j
	}
}

func (b *batch) resolveFrom(i int) {
	view := b.r.groups.View(b.r.reg, b.r.groups.Session(b.session), b.req)
	for _, c := range b.calls[i:] {
		b.resolve(view, c)
	}
}

func (b *batch) runCalls(run []*callState) {
	pending := run[:0:0]
	for _, c := range run {
		if c.early != nil {
			b.finish(c, *c.early)
		} else {
			pending = append(pending, c)
		}
	}
	if len(pending) == 1 {
		b.execute(pending[0])
		return
	}
	var wg sync.WaitGroup
	for _, c := range pending {
		wg.Add(1)
		go func() { defer wg.Done(); b.execute(c) }()
	}
	wg.Wait()
}

// resolve finds what the call runs and validates its input; a call that
// cannot run gets its early result, reported when its run comes.
func (b *batch) resolve(view *groups.View, c *callState) {
	c.early, c.input = nil, nil
	c.target = view.Resolve(c.call.Name)
	if c.target.Code != "" {
		c.early = ptr(bus.ErrorResult(c.call, c.target.Code, c.target.Message))
		return
	}
	input, v, err := schemas.ParseInput(c.call.Input)
	if err != nil {
		d := bus.Detail{Path: "/", Message: err.Error()}
		c.early = ptr(bus.ErrorResult(c.call, bus.CodeInvalidInput, schemas.InvalidInputMessage(c.call.Name, []bus.Detail{d}), d))
		return
	}
	var schema *schemas.Schema
	switch {
	case c.target.Tool != nil:
		schema = c.target.Tool.Schema
	case c.target.External != nil:
		schema = c.target.External.Schema
	}
	if schema != nil {
		if problems := schema.Validate(v); len(problems) > 0 {
			c.early = ptr(bus.ErrorResult(c.call, bus.CodeInvalidInput, schemas.InvalidInputMessage(c.call.Name, problems), problems...))
			return
		}
	}
	c.input = input
}

func ptr[T any](v T) *T { return &v }

func unavailable(c bus.Call) bus.Result {
	return bus.ErrorResult(c, bus.CodeUnavailable, fmt.Sprintf("ToolUnavailableError: No live worker serves the tool '%s' right now.", c.Name))
}

// finish records c's result once and publishes its io.toolbus.call.result.
// It reports false when the call already had a result (e.g. interrupted).
func (b *batch) finish(c *callState, res bus.Result) bool {
	b.mu.Lock()
	if c.result != nil {
		b.mu.Unlock()
		return false
	}
	c.result = &res
	b.mu.Unlock()
	b.r.publishEvent(b, bus.TypeCallResult, c.call.ID, res)
	return true
}

// event builds an event about batch b from this router.
func (r *Router) event(b *batch, typ, callID string, data any) (*bus.Event, error) {
	e, err := bus.NewEvent(typ, r.source, data)
	if err != nil {
		return nil, err
	}
	e.SessionID, e.ReplyID, e.TraceParent, e.TraceState = b.session, b.replyID, b.ev.TraceParent, b.ev.TraceState
	if callID != "" {
		e.Subject, e.ToolCallID = callID, callID
	}
	return e, nil
}

// publishEvent publishes an event on the batch's session events subject.
func (r *Router) publishEvent(b *batch, typ, callID string, data any) {
	e, err := r.event(b, typ, callID, data)
	if err == nil {
		err = bus.Publish(r.nc, r.subj.Events(b.session), e)
	}
	if err != nil {
		r.log.Warn("router: event not published", "type", typ, "session", b.session, "err", err)
	}
}
