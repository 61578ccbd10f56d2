package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	fastjson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/schemas"
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
	cx          callCtx                // the call's context
	cancelled   atomic.Bool            // an agent cancelled the call (abort)
	cancelBy    atomic.Pointer[string] // the id of the cancel event that did (abort); nil: none known
	seq         atomic.Int32
	traceParent string
	traceState  string
	// progressInbox + bus.ProgressSuffix is where the router that sent the
	// call takes its progress; "": P.events (a router of 1.17).
	progressInbox string
	patch         atomic.Pointer[json.RawMessage]

	sc *scratch // the request's, for the usual result while the call runs; nil before and after
}

// scratch holds a call's usual result, a text block, and its event.
type scratch struct {
	res   bus.ExecResult
	block [1]bus.Block
	out   bus.Event
}

// textResult is a success of the one text block s, in the call's scratch.
func (c *Call) textResult(s string) *bus.ExecResult {
	sc := c.sc
	if sc == nil { // not while serve runs the call: never the pooled one
		sc = new(scratch)
	}
	sc.block[0] = bus.Block{Type: bus.BlockText, Text: s}
	sc.res = bus.ExecResult{State: bus.StateSuccess, Output: sc.block[:1:1]}
	return &sc.res
}

// abort ends the call at an agent's cancel, event id, which its result
// names (1.30) when it is a valid id: an agent's cancel of a megabyte's id
// would make the result too large to send.
func (c *Call) abort(id string) {
	if bus.ValidID(id) {
		c.cancelBy.CompareAndSwap(nil, &id)
	}
	c.cancelled.Store(true)
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

// Progress sends an io.toolbus.call.progress event with the blocks, never
// part of the result; blocks past what a progress carries (bus.MaxProgress
// bytes in all, 1.19) are stored as large results' are, and blocks above
// Config.MaxOutput, or a progress still over bus.MaxProgress, are an
// error, nothing sent. It goes to the router
// that sent the call when the exec says it takes progress (progress_reply,
// or a durable call's progress_inbox: docs/protocol.md 5.3, 1.18), which
// publishes it on the session's events; else (a router of 1.17) on
// P.events.<session> itself.
func (c *Call) Progress(blocks ...bus.Block) error {
	if c.w == nil {
		return nil
	}
	// Inline at most progressOutput: the payload less Reserve, less the rest.
	rest := int(c.w.nc.MaxPayload()) - offload.Reserve - progressOutput
	blocks, err := c.w.off.Fit(c.w.base, callKey(c.SessionID, c.ReplyID, c.ID), blocks, rest, false)
	if err != nil {
		return fmt.Errorf("worker: progress: %w", err)
	}
	seq := int(c.seq.Add(1))
	buf := results.Get().(*[]byte) // as executor.serve's: copied when SendTrusted returns
	defer func() {
		if cap(*buf) <= maxPooledResult {
			results.Put(buf)
		}
	}()
	p := bus.Progress{Seq: seq, Output: blocks}
	data, err := p.AppendJSON((*buf)[:0])
	if err != nil {
		return fmt.Errorf("bus: marshal %s data: %w", bus.TypeCallProgress, err)
	}
	*buf = data[:0]
	e := bus.Head(bus.TypeCallProgress, c.w.source)
	e.Data = data
	e.Subject, e.SessionID, e.ReplyID, e.ToolCallID, e.TraceParent, e.TraceState = c.ID, c.SessionID, c.ReplyID, c.ID, c.traceParent, c.traceState
	to := c.progressInbox + bus.ProgressSuffix
	if c.progressInbox == "" {
		to = c.w.subj.EventsMsg(c.SessionID)
	}
	return bus.SendTrusted(to, &e, "", func(m *nats.Msg) error {
		if len(m.Data) > bus.MaxProgress {
			return fmt.Errorf("worker: progress: %d bytes, more than the %d a router takes (docs/protocol.md 5.3); not sent", len(m.Data), bus.MaxProgress)
		}
		return c.w.nc.PublishMsg(m)
	})
}

// progressOutput is the most of a progress's output sent inline: the rest
// of bus.MaxProgress is the event's attributes.
const progressOutput = bus.MaxProgress - 4<<10

// PatchState sets the JSON merge patch (RFC 7386) the router applies to the
// session's agent state when the call succeeds; state_injected tools only.
func (c *Call) PatchState(patch any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("worker: state patch: %w", err)
	}
	raw := json.RawMessage(b)
	c.patch.Store(&raw)
	return nil
}

// Func is a typed tool: In is decoded from the validated input before it
// runs; Out becomes the output (see Register).
type Func[In, Out any] func(ctx context.Context, c *Call, in In) (Out, error)

// Register adds a typed tool to w. The input schema is derived from In unless
// def.InputSchema is set; then an input key that names a field of In only
// in another case is refused, as the Python and Java SDKs match keys
// exactly (tag the fields with the schema's names). Out becomes the output as follows: a string is one
// text block; a bus.Block or []bus.Block is used as is; a *bus.ExecResult is
// passed through; anything else is marshalled to JSON in a text block.
func Register[In, Out any](w *Worker, def bus.ToolDef, fn Func[In, Out]) error {
	own := len(def.InputSchema) > 0 // its author's: keys in another case are refused (keycase.go)
	if !own {
		s, err := schemas.For[In]()
		if err != nil {
			return fmt.Errorf("worker: tool %s: %w", def.Name, err)
		}
		def.InputSchema = s
	}
	return w.Handle(def, func(ctx context.Context, c *Call) (*bus.ExecResult, error) {
		var in In
		if own {
			if k := foldedKey(reflect.TypeFor[In](), c.Input); k != "" {
				return nil, fmt.Errorf("input key %q names a field in another case; keys are matched exactly", k)
			}
		}
		if len(c.Input) > 0 { // UnmarshalOf keeps in on the stack (Unmarshal's any made it escape)
			if err := fastjson.UnmarshalOf(c.Input, &in); err != nil {
				return nil, fmt.Errorf("input does not decode: %w", err)
			}
		}
		out, err := fn(ctx, c, in)
		if err != nil {
			return nil, err
		}
		if s, ok := any(out).(string); ok && c != nil { // the usual text, without boxing it
			return c.textResult(s), nil
		}
		return toResult(out)
	})
}

func toResult(out any) (*bus.ExecResult, error) {
	switch v := out.(type) {
	case string:
		return &bus.ExecResult{Output: bus.Text(v)}, nil
	case bus.Block:
		return &bus.ExecResult{Output: []bus.Block{v}}, nil
	case []bus.Block:
		return &bus.ExecResult{Output: v}, nil
	case *bus.ExecResult:
		return v, nil
	case nil:
		return &bus.ExecResult{}, nil
	}
	b, err := fastjson.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("output does not encode: %w", err)
	}
	return &bus.ExecResult{Output: bus.Text(string(b))}, nil
}

// callCtx is a call's context: parent's child with the request's expiry as
// deadline, cancelled by stop. The context.WithDeadline it stands for is made
// only when a handler asks for more than the deadline (Done, Err, Value).
type callCtx struct {
	parent   context.Context
	deadline time.Time // zero: none
	ctx      context.Context

	mu      sync.Mutex
	cancel  context.CancelFunc // set once made
	made    atomic.Bool        // ctx and cancel are set
	stopped bool
	// stopFirst says the stop came, unmade, before the parent's end and
	// the deadline: the context is then born cancelled by the stop.
	stopFirst bool
}

var _ context.Context = (*callCtx)(nil)

// init makes c parent's child with deadline (zero: none).
func (c *callCtx) init(parent context.Context, deadline time.Time) {
	c.parent, c.deadline = parent, deadline
}

// real is the context itself, made at the first call.
func (c *callCtx) real() context.Context {
	if c.made.Load() {
		return c.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made.Load() {
		return c.ctx
	}
	parent := c.parent
	if c.stopFirst { // not born with an ended parent's cause; its values all the same
		parent = context.WithoutCancel(parent)
	}
	if c.deadline.IsZero() || c.stopFirst {
		c.ctx, c.cancel = context.WithCancel(parent)
	} else {
		c.ctx, c.cancel = context.WithDeadline(parent, c.deadline)
	}
	if c.stopped {
		c.cancel()
	}
	c.made.Store(true)
	return c.ctx
}

// stop ends the context, made or not (a context made later is born ended).
func (c *callCtx) stop() {
	c.mu.Lock()
	if !c.stopped && c.cancel == nil && c.parent != nil {
		c.stopFirst = c.parent.Err() == nil && (c.deadline.IsZero() || time.Now().Before(c.deadline))
	}
	c.stopped = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// cause is context.Cause of the context without making it (an expired
// deadline is not told apart: the router answered timeout already).
func (c *callCtx) cause() error {
	if c.made.Load() {
		return context.Cause(c.ctx)
	}
	c.mu.Lock()
	stopFirst := c.stopFirst
	c.mu.Unlock()
	if stopFirst {
		return context.Canceled
	}
	return context.Cause(c.parent)
}

// Deadline is the earlier of the request's expiry and the parent's deadline.
func (c *callCtx) Deadline() (time.Time, bool) {
	pd, ok := c.parent.Deadline()
	if ok && (c.deadline.IsZero() || pd.Before(c.deadline)) {
		return pd, true
	}
	return c.deadline, !c.deadline.IsZero()
}

func (c *callCtx) Done() <-chan struct{} { return c.real().Done() }

func (c *callCtx) Err() error { return c.real().Err() }

func (c *callCtx) Value(key any) any { return c.real().Value(key) }

// String names the context as context's own do.
func (c *callCtx) String() string { return "worker.callCtx" }
