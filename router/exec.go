package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/tracing"
)

// execute runs c on a worker (through the dedupe ledger for tools that are
// not read-only) and finishes it.
func (b *batch) execute(c *callState) {
	ctx, cancel := context.WithCancel(tracing.Extract(b.ctx, b.trace[0], b.trace[1]))
	defer cancel()
	ctx, span := tracing.StartTool(ctx, trace.SpanKindClient, c.call.Name, c.call.ID, b.session)
	defer span.End()
	b.mu.Lock()
	if c.result != nil { // interrupted before it started
		b.mu.Unlock()
		return
	}
	c.cancel = cancel
	b.mu.Unlock()

	var res bus.Result
	switch t := c.target; {
	case t.Reset:
		res = b.reset(ctx, c)
	case t.Skill:
		res = b.loadSkill(ctx, c)
	case t.Tool.Def.ReadOnly:
		res = b.call(ctx, c)
	default:
		res = b.r.runOnce(ctx, b, c)
	}
	if res.State != bus.StateSuccess {
		span.SetStatus(codes.Error, res.State)
	}
	b.finish(c, res)
}

// reset runs the built-in reset_tools.
func (b *batch) reset(ctx context.Context, c *callState) bus.Result {
	text, err := b.r.groups.Reset(ctx, b.session, c.input)
	if err != nil {
		var be *bus.Error
		if errors.As(err, &be) && be.Code == bus.CodeInvalidInput {
			return bus.ErrorResult(c.call, bus.CodeInvalidInput, be.Message)
		}
		return internal(c.call, err)
	}
	return bus.Result{ID: c.call.ID, Name: c.call.Name, State: bus.StateSuccess, Output: bus.Text(text)}
}

// call sends io.toolbus.exec to the tool's queue group, retrying read-only
// or idempotent tools on unavailable and timeout when max_attempts allows.
func (b *batch) call(ctx context.Context, c *callState) bus.Result {
	def := &c.target.Tool.Def
	attempts := 1
	if def.ReadOnly || def.Idempotent {
		attempts = max(def.MaxAttempts, 1)
	}
	var res bus.Result
	for attempt := 1; attempt <= attempts; attempt++ {
		var retry bool
		res, retry = b.attempt(ctx, c, attempt)
		if !retry || ctx.Err() != nil {
			break
		}
	}
	return res
}

// attempt makes one exec request; retry reports an unavailable or timeout
// outcome.
func (b *batch) attempt(ctx context.Context, c *callState, attempt int) (bus.Result, bool) {
	r := b.r
	timeout := time.Duration(c.target.Tool.Def.TimeoutMS) * time.Millisecond
	deadline := time.Now().Add(timeout)
	if !b.deadline.IsZero() && b.deadline.Before(deadline) {
		deadline = b.deadline
		timeout = time.Until(deadline).Round(time.Millisecond)
	}
	if timeout <= 0 {
		return timeoutResult(c, 0), false
	}
	req := bus.ExecRequest{Call: bus.Call{ID: c.call.ID, Name: c.call.Name, Input: c.input},
		User: b.data.User, Context: b.data.Context, Attempt: attempt}
	if c.target.Tool.Def.StateInjected {
		sess, err := r.groups.Load(ctx, b.session)
		if err != nil {
			return internal(c.call, err), false
		}
		req.State = sess.State
		if len(req.State) == 0 {
			req.State = json.RawMessage(`{}`)
		}
	}
	e, err := r.event(b, bus.TypeExec, c.call.ID, req)
	if err != nil {
		return internal(c.call, err), false
	}
	e.Subject = ""
	e.ExpiryTime = deadline.UTC().Format(time.RFC3339Nano)
	e.TraceParent, e.TraceState = tracing.Inject(ctx, e.TraceParent, e.TraceState)
	// The worker's context ends at the deadline; its reply ("context
	// deadline exceeded") may then race the router's own timer, so the
	// router waits a little longer and judges by the clock.
	rctx, cancel := context.WithDeadline(ctx, deadline.Add(timeoutGrace))
	defer cancel()
	wctx, vanish := context.WithCancelCause(rctx)
	defer vanish(nil)
	w := r.watchExec(c.call.Name, bus.CallKey(b.session, b.replyID, c.call.ID), vanish)
	defer r.unwatchExec(w)
	resp, err := bus.SendRequest(wctx, r.nc, r.subj.Exec(c.call.Name), e)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return unavailable(c.call), true
	case context.Cause(ctx) == errDrainDeadline:
		// The router's drain deadline: the worker may still finish the
		// call, so its outcome is unknown (what the ledger records).
		return unknownOutcome(c.call), false
	case ctx.Err() != nil:
		return interrupted(c.call), false
	case context.Cause(wctx) == errVanished:
		// The worker that took the call stopped beating without finishing
		// it: a read-only or idempotent call may run again elsewhere.
		def := &c.target.Tool.Def
		return unknownOutcome(c.call), def.ReadOnly || def.Idempotent
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return timeoutResult(c, timeout), true
	default:
		return internal(c.call, err), false
	}
	res := r.execResult(c, resp)
	if res.State != bus.StateSuccess && !time.Now().Before(deadline) {
		return timeoutResult(c, timeout), true
	}
	return res, false
}

// timeoutGrace is how long past a call's deadline the router still waits
// for the worker's reply before it reports the timeout itself.
const timeoutGrace = 50 * time.Millisecond

func timeoutResult(c *callState, d time.Duration) bus.Result {
	return bus.ErrorResult(c.call, bus.CodeTimeout, "Tool execution timeout after "+d.String())
}

func interrupted(c bus.Call) bus.Result {
	return bus.ErrorResult(c, bus.CodeInterrupted, bus.InterruptedText)
}

func internal(c bus.Call, err error) bus.Result {
	return bus.ErrorResult(c, bus.CodeInternal, fmt.Sprintf("InternalError: %v", err))
}

// execResult turns a worker's reply into the call's result.
func (r *Router) execResult(c *callState, resp *nats.Msg) bus.Result {
	e, err := bus.Decode(resp)
	if err != nil {
		return internal(c.call, fmt.Errorf("worker reply: %w", err))
	}
	if e.Type == bus.TypeError {
		var be bus.Error
		_ = e.DataAs(&be)
		return internal(c.call, fmt.Errorf("worker refused the call: %s", be.Error()))
	}
	var xr bus.ExecResult
	if e.Type != bus.TypeExecResult {
		return internal(c.call, fmt.Errorf("worker replied with %q", e.Type))
	}
	if err := e.DataAs(&xr); err != nil {
		return internal(c.call, err)
	}
	if xr.Output == nil {
		xr.Output = []bus.Block{}
	}
	for i, bl := range xr.Output {
		if err := checkBlock(bl); err != nil {
			return bus.ErrorResult(c.call, bus.CodeToolError, fmt.Sprintf("Error: the tool returned an invalid output block %d: %v", i, err))
		}
	}
	res := bus.Result{ID: c.call.ID, Name: c.call.Name, State: xr.State, Output: xr.Output, Metadata: xr.Metadata}
	if len(xr.StatePatch) > 0 && string(xr.StatePatch) != "null" {
		if err := r.patchState(e.SessionID, &c.target.Tool.Def, xr.StatePatch); err != nil {
			var be *bus.Error
			if errors.As(err, &be) && be.Code == bus.CodeToolError { // the worker's fault
				return bus.ErrorResult(c.call, bus.CodeToolError, be.Message)
			}
			return internal(c.call, err)
		}
	}
	switch xr.State {
	case bus.StateSuccess:
	case bus.StateError:
		fail(&res, bus.CodeToolError, toolFailedText)
	case bus.StateInterrupted:
		// A cancel reaches the worker and the router at once; whichever
		// acts first, the call ends with the one text of PROTOCOL.md 3.5.
		return interrupted(c.call)
	default:
		return internal(c.call, fmt.Errorf("worker returned state %q", xr.State))
	}
	return res
}

// toolFailedText is the text of an error result whose tool or handler gave
// no text of its own.
const toolFailedText = "Error: the tool failed without saying why."

// fail makes res, a tool's or handler's own result in an error state, an
// error result with code: its error message is the output's text, and an
// output without a text block gets one, with fallback, before the rest
// (PROTOCOL.md 3.3: an error result still carries a readable text block).
func fail(res *bus.Result, code, fallback string) {
	msg := textOf(res.Output)
	if msg == "" {
		msg = fallback
		res.Output = append(bus.Text(fallback), res.Output...)
	}
	res.Error = &bus.ResultError{Code: code, Message: msg}
}

func textOf(blocks []bus.Block) string {
	var sb strings.Builder
	for _, bl := range blocks {
		if bl.Type == bus.BlockText {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(bl.Text)
		}
	}
	return sb.String()
}

// patchState applies a worker's JSON merge patch (RFC 7386) to the
// session's agent state, with compare-and-set so that concurrent patches
// from two calls both land.
func (r *Router) patchState(session string, def *bus.ToolDef, patch json.RawMessage) error {
	if !def.StateInjected {
		return bus.Errorf(bus.CodeToolError, "Error: the tool returned a state_patch but is not registered with state_injected; the patch was not applied.")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.groups.Update(ctx, session, func(s *groups.Session) error {
		cur := s.State
		if len(cur) == 0 {
			cur = json.RawMessage(`{}`)
		}
		next, err := jsonpatch.MergePatch(cur, patch)
		if err != nil {
			return bus.Errorf(bus.CodeToolError, "Error: the tool returned a state_patch that is not a JSON merge patch: %v", err)
		}
		s.State = next
		return nil
	})
	return err
}

// errVanished cancels an exec request whose worker is gone.
var errVanished = errors.New("the worker running the call vanished")

// execWatch is an exec request in flight, watched for a vanished worker.
type execWatch struct {
	tool, key string
	since     time.Time
	vanish    context.CancelCauseFunc
}

func (r *Router) watchExec(tool, key string, vanish context.CancelCauseFunc) *execWatch {
	w := &execWatch{tool: tool, key: key, since: time.Now(), vanish: vanish}
	r.execMu.Lock()
	r.execs[w] = struct{}{}
	r.execMu.Unlock()
	return w
}

func (r *Router) unwatchExec(w *execWatch) {
	r.execMu.Lock()
	delete(r.execs, w)
	r.execMu.Unlock()
}

// watchWorkers runs every heartbeat: an exec request older than three
// heartbeats whose call no live worker lists in its beats any more lost its
// worker (workers list their calls in flight with every beat, and a dead
// worker's beats expire after three), so it ends now instead of at its
// timeout. While a live worker of the tool does not report its calls in
// flight (a worker written from PROTOCOL.md alone), nothing can be told and
// the call waits for its timeout.
func (r *Router) watchWorkers(now time.Time, hb time.Duration) {
	if r.reg.Troubled(now) {
		return // beats may be missing for want of a bucket, not of workers
	}
	r.execMu.Lock()
	var lost []*execWatch
	for w := range r.execs {
		if now.Sub(w.since) > 3*hb && !r.reg.MayHold(w.tool, w.key) {
			lost = append(lost, w)
		}
	}
	r.execMu.Unlock()
	for _, w := range lost {
		r.log.Warn("router: worker vanished mid-call", "tool", w.tool, "call", w.key)
		w.vanish(errVanished)
	}
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fn(now)
		}
	}
}
