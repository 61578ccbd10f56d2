package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/tracing"
)

// executor runs one call: it checks the exec request, runs the handler under
// the call's context, fits the output and answers through a replier.
type executor struct {
	nc     *nats.Conn
	subj   bus.Subjects
	source string
	log    *slog.Logger
	off    *offload.Offloader
	obs    Observer
	base   context.Context // ends with errDrained when a drain's deadline passes
	calls  *callTable
}

// serve checks one exec request (e and err as bus.DecodeHead or bus.Decode
// gave them: e validated), runs the call as c (zeroed) and answers
// through rp; key is the call's listed key ("" when none). The usual result
// and its event are written in sc (zeroed), reusable once serve returns.
func (w *executor) serve(t *tool, m *nats.Msg, e *bus.Event, err error, key string, c *Call, sc *scratch, rp replier) {
	if err == nil && e.Type != bus.TypeExec {
		err = bus.Errorf(bus.CodeBadEvent, "expected %s on %s, got %s", bus.TypeExec, m.Subject, e.Type)
	}
	var req bus.ExecRequest
	if err == nil { // the raw members are slices of the call's message
		err = req.FromEvent(e, e.ToolCallID, t.def.Name)
	}
	// Decoding validated the ids the event has (Event.Validate): only absent
	// ones, and a call id other than the event's, are left to check.
	if err == nil && (e.SessionID == "" || e.ReplyID == "" || req.Call.ID == "" || req.Call.ID != e.ToolCallID && !bus.ValidID(req.Call.ID)) {
		err = bus.Errorf(bus.CodeBadEvent, "an exec request needs valid sessionid, replyid and call id")
	}
	if err == nil && req.Call.Name != t.def.Name {
		err = bus.Errorf(bus.CodeBadEvent, "call names tool %q on the subject of %q", req.Call.Name, t.def.Name)
	}
	if err == nil && notObject(req.Call.Input) {
		err = bus.Errorf(bus.CodeBadEvent, "call.input must be an object")
	}
	if err != nil {
		var be *bus.Error
		if !errors.As(err, &be) {
			be = bus.Errorf(bus.CodeBadEvent, "%v", err)
		}
		rp.refuse(be)
		return
	}
	start := time.Now()
	w.obs.Running(1)
	defer w.obs.Running(-1)
	if w.base.Err() != nil {
		rp.drop()
		return // the drain's deadline passed before the call got a slot: never start it, never answer
	}
	// The call's context (made when the handler first looks, call.go): the
	// request's deadline, a child of the worker's base and the span.
	sctx, span := tracing.StartTool(tracing.Extract(w.base, e.TraceParent, e.TraceState), trace.SpanKindServer, t.def.Name, req.Call.ID, e.SessionID)
	defer span.End()
	exp, _ := e.Expiry() // checked by Validate when the event was decoded
	c.cx.init(sctx, exp)
	ctx := context.Context(&c.cx)
	defer c.cx.stop()
	tp, ts := tracing.Inject(sctx, e.TraceParent, e.TraceState)
	c.ID, c.Name, c.SessionID, c.ReplyID = req.Call.ID, req.Call.Name, e.SessionID, e.ReplyID
	c.Input, c.User, c.Context, c.Attempt, c.State = req.Call.Input, absentIfNull(req.User), absentIfNull(req.Context), req.Attempt, req.State
	c.w, c.traceParent, c.traceState, c.sc = w, tp, ts, sc
	// Where the router takes the call's progress (1.18): none from a router of 1.17.
	if _, core := rp.(*coreReply); core && req.ProgressReply {
		c.progressInbox = m.Reply
	} else if !core {
		c.progressInbox = req.ProgressInbox // a durable call's
	}
	defer func() { c.sc = nil }()
	if key == "" || e.ToolCallID != req.Call.ID {
		key = bus.CallKey(e.SessionID, e.ReplyID, req.Call.ID)
	}
	w.calls.begin(key, c) // a cancel that overtook this request aborts it: never started
	defer w.calls.end(key, c)

	var res *bus.ExecResult
	if !c.cancelled.Load() {
		res = w.run(ctx, t, c)
	}
	if c.cx.cause() == errDrained { // no answer, as from a stopped worker
		w.log.Warn("worker: call cut off by the drain deadline", "tool", t.def.Name, "call", c.ID)
		rp.drop()
		return
	}
	if c.cancelled.Load() {
		// The cancel's id tells the router to hold the batch's next run
		// until it has handled the cancel too (protocol 3.5, 1.30).
		res = &bus.ExecResult{State: bus.StateInterrupted, Output: bus.Text(bus.InterruptedText)}
		if id := c.cancelBy.Load(); id != nil {
			res.Cancel = *id
		}
	}
	ran := time.Since(start)
	t.calls.Add(1)
	t.nanos.Add(int64(ran))
	if res.State != bus.StateSuccess {
		t.errors.Add(1)
	}
	took := ran // the observer's time includes the fit, which the usual output skips
	if fitted := w.fit(ctx, t, key, res); fitted != res {
		res, took = fitted, time.Since(start)
	}
	w.obs.Finished(t.def.Name, res.State, took)
	if res.State != bus.StateSuccess {
		span.SetStatus(codes.Error, res.State)
	}
	// Only the metadata or the state patch can still be too large (the
	// payload limit is read under a lock: not for the usual result).
	if extra := len(res.Metadata) + len(res.StatePatch); extra > 0 && int64(extra) > w.nc.MaxPayload()-offload.Reserve {
		res = &bus.ExecResult{State: bus.StateError, Output: bus.Text(fmt.Sprintf(
			"Error: the result of tool '%s' has %d bytes of metadata and state patch, more than the NATS payload limit of %d bytes allows; the state patch was not applied.",
			t.def.Name, extra, w.nc.MaxPayload()))}
	}
	buf := results.Get().(*[]byte) // both repliers have sent it when result returns
	data, err := res.AppendJSON((*buf)[:0])
	if err != nil {
		failed := bus.ExecResult{State: bus.StateError, Output: bus.Text("worker: result cannot be encoded: " + err.Error())}
		data, _ = failed.AppendJSON((*buf)[:0])
	}
	out := &sc.out
	*out = bus.Head(bus.TypeExecResult, w.source)
	out.Data = data
	out.SessionID, out.ReplyID, out.ToolCallID, out.TraceParent, out.TraceState = e.SessionID, e.ReplyID, req.Call.ID, tp, ts
	rp.result(out)
	out.Data = nil
	if cap(data) <= maxPooledResult {
		*buf = data
		results.Put(buf)
	}
}

// results are the buffers results are encoded in, up to maxPooledResult.
var results = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledResult = 64 << 10

// fit makes a result's output fit the message (offload.Fit); one that
// cannot becomes an error result without the state patch.
func (w *executor) fit(ctx context.Context, t *tool, key string, res *bus.ExecResult) *bus.ExecResult {
	out, err := w.off.Fit(ctx, key, res.Output, len(res.Metadata)+len(res.StatePatch), res.State != bus.StateSuccess)
	if err == nil && len(out) == len(res.Output) && (len(out) == 0 || &out[0] == &res.Output[0]) {
		return res // the usual small output, kept as it is
	}
	if err == nil {
		r := *res
		r.Output = out
		return &r
	}
	var msg string
	if tl, ok := errors.AsType[*offload.TooLargeError](err); ok {
		msg = fmt.Sprintf("Error: the output of tool '%s' is %d bytes, more than this worker's limit of %d bytes; it was neither sent nor stored.", t.def.Name, tl.Size, tl.Max)
	} else {
		msg = fmt.Sprintf("Error: the output of tool '%s' is too large to send inline and could not be stored: %v", t.def.Name, err)
	}
	w.log.Warn("worker: output not kept", "tool", t.def.Name, "key", key, "err", err)
	return &bus.ExecResult{State: bus.StateError, Output: bus.Text(msg)}
}

// run calls the handler, turning panics and errors into error results.
func (w *executor) run(ctx context.Context, t *tool, c *Call) (res *bus.ExecResult) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("worker: tool panicked", "tool", t.def.Name, "panic", p)
			res = &bus.ExecResult{State: bus.StateError, Output: bus.Text(fmt.Sprintf("Error: tool %s failed: %v", t.def.Name, p))}
		}
	}()
	res, err := t.h(ctx, c)
	if err != nil {
		return &bus.ExecResult{State: bus.StateError, Output: bus.Text("Error: " + err.Error())}
	}
	if res == nil {
		res = &bus.ExecResult{State: bus.StateSuccess}
	}
	if res.State == "" {
		res.State = bus.StateSuccess
	}
	if res.Output == nil {
		res.Output = []bus.Block{}
	}
	if patch := c.patch.Load(); patch != nil {
		if !t.def.StateInjected {
			return &bus.ExecResult{State: bus.StateError, Output: bus.Text("Error: tool " + t.def.Name + " set a state patch but is not state_injected")}
		}
		res.StatePatch = *patch
	}
	return res
}
