package worker

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/toolbus/toolbus/bus"
)

// Call is what a tool receives besides its input: the identifiers of the
// call, the runtime context of the batch (never shown to the model), the
// session's agent state for state_injected tools, and a progress emitter.
type Call struct {
	ID        string
	Name      string
	SessionID string
	ReplyID   string
	// Input is the call's input object, already validated by the router.
	Input json.RawMessage
	// User and Context are the batch's runtime context, unchanged; nil when
	// the batch had none.
	User    json.RawMessage
	Context json.RawMessage
	// Attempt counts from 1; it grows when the router retries.
	Attempt int
	// State is the session's agent state (state_injected tools only).
	State json.RawMessage

	w           *executor
	cx          callCtx     // the call's context (callctx.go)
	stop        func()      // for tests: called at an abort besides cx.stop
	cancelled   atomic.Bool // an agent cancelled the call (abort)
	traceParent string
	traceState  string

	mu    sync.Mutex
	seq   int
	patch json.RawMessage

	// The call's usual result, a text block, and the event that carries a
	// result, kept here: the call is allocated once per request (worker.go).
	res   bus.ExecResult
	block [1]bus.Block
	out   bus.Event
}

// textResult is a success whose output is the one text block s, in c.
func (c *Call) textResult(s string) *bus.ExecResult {
	c.block[0] = bus.Block{Type: bus.BlockText, Text: s}
	c.res = bus.ExecResult{State: bus.StateSuccess, Output: c.block[:1:1]}
	return &c.res
}

// abort ends the call at an agent's cancel.
func (c *Call) abort() {
	c.cancelled.Store(true)
	if c.stop != nil {
		c.stop()
	}
	c.cx.stop()
}

// UserString returns User when it is a JSON string, else its JSON text.
func (c *Call) UserString() string {
	var s string
	if json.Unmarshal(c.User, &s) == nil {
		return s
	}
	return string(c.User)
}

// ContextValue decodes the runtime context value named key into v. It
// reports false when the context has no such key.
func (c *Call) ContextValue(key string, v any) (bool, error) {
	if len(c.Context) == 0 {
		return false, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(c.Context, &m); err != nil {
		return false, fmt.Errorf("worker: context is not an object: %w", err)
	}
	raw, ok := m[key]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(raw, v)
}

// Progress publishes an io.toolbus.call.progress event with the blocks on
// the session's events subject. It never becomes part of the result. Large
// blocks are stored as for results (Config.InlineLimit); blocks above
// Config.MaxOutput are an error and nothing is published.
func (c *Call) Progress(blocks ...bus.Block) error {
	if c.w == nil {
		return nil
	}
	blocks, err := c.w.off.Fit(c.w.base, bus.CallKey(c.SessionID, c.ReplyID, c.ID), blocks, 0, false)
	if err != nil {
		return fmt.Errorf("worker: progress: %w", err)
	}
	c.mu.Lock()
	c.seq++
	seq := c.seq
	c.mu.Unlock()
	e, err := bus.NewEvent(bus.TypeCallProgress, c.w.source, bus.Progress{Seq: seq, Output: blocks})
	if err != nil {
		return err
	}
	e.Subject, e.SessionID, e.ReplyID, e.ToolCallID, e.TraceParent, e.TraceState = c.ID, c.SessionID, c.ReplyID, c.ID, c.traceParent, c.traceState
	return bus.Publish(c.w.nc, c.w.subj.Events(c.SessionID), e)
}

// PatchState sets the JSON merge patch (RFC 7386) that the router applies to
// the session's agent state when the call succeeds. Only state_injected
// tools may use it.
func (c *Call) PatchState(patch any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("worker: state patch: %w", err)
	}
	c.mu.Lock()
	c.patch = b
	c.mu.Unlock()
	return nil
}
