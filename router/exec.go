package router

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/replies"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/session"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/tracing"
)

// job is one call for an executor to run, new, resumed or confirmed alike.
type job struct {
	session, replyID string
	trace            [2]string       // traceparent, tracestate of the batch
	deadline         time.Time       // the batch's expirytime; zero when absent
	user, context    json.RawMessage // the batch's user and context
	call             bus.Call        // with its validated input
	sent             json.RawMessage // the input as the agent sent it when call's is a person's edit (a confirmed call); nil: call's
	tool             *registry.Tool

	// A batch's call (nil b and c: a confirmed call, below the chain).
	b        *batch
	c        *callState
	admitted chan struct{} // closed once the quotas counted the call (job.admit); nil when nobody waits

	// bounded: a read-only call of one attempt, whose context is the
	// attempt's (callContext), ending at until; cancel ends it.
	bounded bool
	until   time.Time
	timeout time.Duration
	cancel  stopper
	keyed   string    // key(), once computed
	watch   execWatch // the request in flight (execWatches)
	// progress is the attempt's progress so far (progressRelay, progress.go).
	progress progressGate
	attempt  callCtx // the first attempt's context when not bounded (attemptContext)

	// landed: the ledger held the chain's result when it returned (once),
	// on the call's own goroutine; kept in callState.landed.
	landed bool
	// cancelledBy is the cancel event's id on the worker's interrupted
	// result (protocol 3.5, 1.30): the batch's next run waits for it
	// (awaitCancels).
	cancelledBy string
}

// callContext returns the one context of call j under parent: a core
// read-only call of one attempt gets the attempt's deadline at once (one
// context and timer per call); any other call none, each attempt its own
// (attemptContext), as a ledger's claim and record must outlive the tool's
// deadline. Under the router's base it is the callState's callCtx.
func (j *job) callContext(parent context.Context) (context.Context, stopper) {
	var d time.Time
	if j.runsTool() {
		def := &j.tool.Def
		if def.ReadOnly && !def.Durable && max(def.MaxAttempts, 1) == 1 {
			j.until, j.timeout = callDeadline(time.Now(), def.TimeoutMS, j.deadline)
			if j.timeout > 0 {
				j.bounded = true
				d = j.until.Add(ledger.TimeoutGrace)
			}
		}
	}
	if root := j.b.p.calls; root != nil && j.b.ctx == root.parent && parent == j.b.ctx {
		// The usual case: no context package allocations, no base lock.
		j.c.ctx.start(root, d)
		j.cancel = &j.c.ctx
		return &j.c.ctx, j.cancel
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if j.bounded {
		ctx, cancel = context.WithDeadline(parent, d)
	} else {
		ctx, cancel = context.WithCancel(parent)
	}
	j.cancel = cancelFunc(cancel)
	return ctx, j.cancel
}

// attemptContext returns the context of one attempt of j under ctx, the
// call's, ending at d: the job's own callCtx the first time, a new one
// later (something may still hold an ended one).
func (j *job) attemptContext(ctx context.Context, d time.Time) *callCtx {
	a := &j.attempt
	if a.done != nil {
		a = new(callCtx)
	}
	a.start(ctx, d)
	return a
}

// stopper ends a call's context: a callCtx (no closure for it), or a
// context.CancelFunc (cancelFunc, no allocation either).
type stopper interface{ stop() }

type cancelFunc context.CancelFunc

func (f cancelFunc) stop() { f() }

// key is the call's ledger and P_parked key.
func (j *job) key() string {
	if j.keyed == "" {
		j.keyed = bus.CallKey(j.session, j.replyID, j.call.ID)
	}
	return j.keyed
}

// admit says the call passed the quotas, letting the next be counted.
func (j *job) admit() {
	if j.admitted != nil {
		close(j.admitted)
		j.admitted = nil
	}
}

// runsTool reports whether the job is a batch's call of a registry tool.
func (j *job) runsTool() bool {
	if j.c == nil || j.tool == nil {
		return false
	}
	t := j.c.target
	return !t.Reset && !t.Skill && !t.Search && !t.Read && t.External == nil
}

// execStep is the last executor: the built-ins here, a tool through the runner.
type execStep struct {
	runner   runnerPort
	sessions sessionPort
}

// Exec runs j, a call of a batch, under ctx and returns its result.
func (s execStep) Exec(ctx context.Context, j *job) bus.Result {
	j.admit()
	b, c := j.b, j.c
	if c.writesSession() {
		ctx = session.ForCall(ctx, b.replyID, c.call.ID) // a cancel's mark refuses its write (1.32)
	}
	switch t := c.target; {
	case t.Reset:
		text, err := s.sessions.Reset(ctx, b.session, c.input)
		return builtinResult(c.call, text, err)
	case t.Skill:
		return s.runner.loadSkill(ctx, b.session, b.data.User, c.call, c.input)
	case t.Search:
		return s.runner.search(ctx, b, c)
	case t.Read:
		return s.runner.readOutput(ctx, b.session, c.call, c.input)
	}
	return s.runner.runTool(ctx, j)
}

// jobOf is what the executor needs of call c, kept in c (one allocation).
func jobOf(b *batch, c *callState) *job {
	c.job = job{session: b.session, replyID: b.replyID, trace: b.trace, deadline: b.deadline,
		user: b.data.User, context: b.data.Context,
		call: bus.Call{ID: c.call.ID, Name: c.call.Name, Input: c.input, Background: c.call.Background}, tool: c.target.Tool, b: b, c: c, admitted: c.admitted}
	c.admitted = nil
	return &c.job
}

// builtinResult is a built-in's result: text, its invalid_input, else internal.
func builtinResult(c bus.Call, text string, err error) bus.Result {
	if err == nil {
		return bus.Result{ID: c.ID, Name: c.Name, State: bus.StateSuccess, Output: bus.Text(text)}
	}
	if be, ok := errors.AsType[*bus.Error](err); ok && be.Code == bus.CodeInvalidInput {
		return bus.ErrorResult(c, bus.CodeInvalidInput, be.Message)
	}
	if errors.Is(err, session.ErrCancelled) {
		return interrupted(c)
	}
	return internal(c, err)
}

// toolRunner runs a tool call through a work queue or the core chain.
type toolRunner struct {
	exec    Executor // the ledger, then core request/reply to the workers
	durable Executor // durable tools' work queues
}

// runTool runs a tool call in a span of its own.
func (t *toolRunner) runTool(ctx context.Context, j *job) bus.Result {
	ctx, span := tracing.StartTool(tracing.Extract(ctx, j.trace[0], j.trace[1]), trace.SpanKindClient, j.call.Name, j.call.ID, j.session)
	defer span.End()
	var res bus.Result
	if j.tool.Def.Durable {
		res = t.durable.Exec(ctx, j)
	} else {
		res = t.exec.Exec(ctx, j)
	}
	if res.State != bus.StateSuccess {
		span.SetStatus(codes.Error, res.State)
	}
	return res
}

// requestReply is the executor of core NATS request/reply: io.toolbus.exec
// to the tool's queue group (docs/protocol.md 5.1), retrying read-only or
// idempotent tools on unavailable and timeout when max_attempts allows.
type requestReply struct {
	replies *replies.Mux // the router's exec replies (a fresh inbox per request)
	execs   *execSubjects
	subj    bus.Subjects
	source  string
	workers interface{ ExecForm(string) bus.ExecForm } // the form every live worker reads (registry)
	groups  *groups.Store                              // the agent state, for state_injected tools
	outputs *outputs                                   // seals the workers' stored outputs
	watch   *execWatches                               // the watchdog's view of requests in flight
}

// Exec runs j on the tool's workers.
func (x requestReply) Exec(ctx context.Context, j *job) bus.Result {
	def := &j.tool.Def
	attempts := 1
	if def.ReadOnly || def.Idempotent {
		attempts = max(def.MaxAttempts, 1)
	}
	var res bus.Result
	for attempt := 1; attempt <= attempts; attempt++ {
		var retry bool
		res, retry = x.attempt(ctx, j, attempt)
		if !retry || ctx.Err() != nil {
			break
		}
	}
	return res
}

// attempt makes one exec request; retry: unavailable or timeout.
func (x requestReply) attempt(ctx context.Context, j *job, attempt int) (bus.Result, bool) {
	bounded := j.bounded && attempt == 1 // ctx is the attempt's already (callContext)
	deadline, timeout := j.until, j.timeout
	if !bounded {
		deadline, timeout = callDeadline(time.Now(), j.tool.Def.TimeoutMS, j.deadline)
	}
	if timeout <= 0 {
		return timeoutResult(j.call, 0), false
	}
	req := bus.ExecRequest{Call: j.call, User: j.user, Context: j.context, Attempt: attempt, ProgressReply: true}
	if j.tool.Def.StateInjected {
		sess, err := x.groups.Load(ctx, j.session)
		if err != nil {
			return internal(j.call, err), false
		}
		req.State = sess.State
		if len(req.State) == 0 {
			req.State = json.RawMessage(`{}`)
		}
	}
	var e bus.Event // sent and let go: on the stack, its data in a pooled buffer
	data := execData.Get().(*[]byte)
	execEventTo(&e, ctx, x.source, j, req, deadline, (*data)[:0])
	// The worker's reply at its deadline may race the router's timer: the
	// router waits a grace longer and judges by the clock. The watchdog
	// cancels the attempt too, marking the watch vanished first.
	wctx, cancel := ctx, j.cancel
	if !bounded {
		a := j.attemptContext(ctx, deadline.Add(ledger.TimeoutGrace))
		defer a.stop()
		wctx, cancel = a, a
	}
	w := x.watch.add(&j.watch, j.call.Name, callRef{j.session, j.replyID, j.call.ID}, cancel)
	defer x.watch.remove(w)
	j.progress = progressGate{} // a new attempt counts from its own seq 1
	resp, err := x.request(wctx, j, &e)
	if cap(e.Data) <= maxExecData { // sent: nothing holds it any more
		*data = e.Data[:0]
		execData.Put(data)
	}
	if err != nil {
		return requestFailed(ctx, err, w.vanished.Load(), j, timeout)
	}
	res, patch, by := execReply(j.call, callRef{j.session, j.replyID, j.call.ID}, resp)
	j.cancelledBy = by
	if hasStored(res.Output) { // the call's key only then: one allocation less per call
		res, patch = x.outputs.sealOutput(j.session, j.key(), res, patch)
	}
	if patch != nil {
		if err := patchState(ctx, x.groups, j.session, &j.tool.Def, patch); err != nil {
			if be, ok := errors.AsType[*bus.Error](err); ok && be.Code == bus.CodeToolError { // the worker's fault
				res = bus.ErrorResult(j.call, bus.CodeToolError, be.Message)
			} else {
				res = internal(j.call, err)
			}
		}
	}
	if res.State != bus.StateSuccess && !time.Now().Before(deadline) {
		return timeoutResult(j.call, timeout), true
	}
	return res, false
}

// request sends exec event e of j to its tool's queue group and waits for
// the reply until ctx ends, on an inbox of the request's own
// (internal/replies): no stray or late reply reaches another call, and the
// progress sent beside it is j's (progress.go). The errors are nats.go's
// request's.
func (x requestReply) request(ctx context.Context, j *job, e *bus.Event) (*nats.Msg, error) {
	return x.replies.Request(ctx, j, func(inbox string) (err error) {
		x.sendExec(j.call.Name, e, func(m *nats.Msg) {
			m.Reply = inbox
			err = x.replies.Conn().PublishMsg(m)
			m.Reply = ""
		})
		return err
	})
}

// sendExec calls send with the message of exec event e to tool's queue
// group, in the form every live worker reads (reused once send returns).
func (x requestReply) sendExec(tool string, e *bus.Event, send func(*nats.Msg)) {
	subject := x.execs.of(x.subj.Workers, tool)
	form := bus.ExecStructured
	if x.workers != nil {
		form = x.workers.ExecForm(tool)
	}
	if form != bus.ExecStructured {
		bus.WithBinaryMsg(subject, e, form == bus.ExecCompact, send)
		return
	}
	m, err := e.Msg(subject)
	if err != nil { // cannot happen: the data is JSON made here
		m = bus.BinaryMsg(subject, e)
	}
	send(m)
}

// execData are the buffers of exec requests' data, free once published
// (a core publish copies it); past maxExecData one is not kept.
var execData = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxExecData = 64 << 10

// execSubjects keeps P.exec.<tool> by tool name, so a call builds no
// subject string; past maxExecSubjects names it starts again.
type execSubjects struct {
	mu sync.RWMutex
	m  map[string]string
}

const maxExecSubjects = 4096

// of is tool's exec subject of w; a nil x builds it.
func (x *execSubjects) of(w bus.WorkerSubjects, tool string) string {
	if x == nil {
		return w.Exec(tool)
	}
	x.mu.RLock()
	s, ok := x.m[tool]
	x.mu.RUnlock()
	if ok {
		return s
	}
	s = w.Exec(tool)
	x.mu.Lock()
	if x.m == nil || len(x.m) >= maxExecSubjects {
		x.m = make(map[string]string)
	}
	x.m[tool] = s
	x.mu.Unlock()
	return s
}

// execEventTo makes e the io.toolbus.exec of j (protocol 5.1) in buf.
func execEventTo(e *bus.Event, ctx context.Context, source string, j *job, req bus.ExecRequest, deadline time.Time, buf []byte) {
	*e = bus.Head(bus.TypeExec, source)
	e.Data = req.AppendJSON(buf)
	e.SessionID, e.ReplyID, e.ToolCallID = j.session, j.replyID, j.call.ID
	e.ExpiryTime = bus.FormatExpiry(deadline)
	e.TraceParent, e.TraceState = tracing.Inject(ctx, j.trace[0], j.trace[1])
}

// callDeadline is when a call started at now must end: its tool's timeout,
// or the batch's deadline when that comes first; timeout is the time left.
func callDeadline(now time.Time, timeoutMS int64, batch time.Time) (deadline time.Time, timeout time.Duration) {
	timeout = time.Duration(timeoutMS) * time.Millisecond
	deadline = now.Add(timeout)
	if !batch.IsZero() && batch.Before(deadline) {
		deadline = batch
		timeout = batch.Sub(now).Round(time.Millisecond)
	}
	return deadline, timeout
}

// requestFailed turns an exec request without a reply into the call's
// result, and whether to retry; vanished: the watchdog ended it.
func requestFailed(ctx context.Context, err error, vanished bool, j *job, timeout time.Duration) (bus.Result, bool) {
	def := &j.tool.Def
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return unavailable(j.call), true
	case context.Cause(ctx) == errDrainDeadline:
		// The drain deadline: the worker may still finish, so the outcome is unknown.
		return ledger.UnknownOutcome(j.call), false
	case vanished && !errors.Is(err, context.DeadlineExceeded):
		// Its worker stopped beating: a read-only or idempotent call may run again.
		return ledger.UnknownOutcome(j.call), def.ReadOnly || def.Idempotent
	case errors.Is(ctx.Err(), context.Canceled):
		return interrupted(j.call), false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return timeoutResult(j.call, timeout), true
	}
	return internal(j.call, err), false
}

// The results the router gives that the ledger gives too (bus/records.go).
var (
	timeoutResult = bus.TimeoutResult
	interrupted   = bus.InterruptedResult
	internal      = bus.InternalResult
)

// execReply turns a worker's reply to call ref into the call's result and
// the state patch to apply, if any; a reply naming another call is refused.
// An exec result is read in one pass (FromEvent checks its JSON); any
// other reply is decoded again in full (execReplyChecked). cancelledBy is
// the cancel's id on an interrupted result that names one (1.30).
func execReply(c bus.Call, ref callRef, resp *nats.Msg) (res bus.Result, patch json.RawMessage, cancelledBy string) {
	var e bus.Event
	var xr bus.ExecResult
	if bus.DecodeHead(resp, &e) != nil || e.Type != bus.TypeExecResult || xr.FromEvent(&e) != nil {
		var refused *bus.Result
		if xr, refused = execReplyChecked(c, resp, &e); refused != nil {
			return *refused, nil, ""
		}
	}
	if ref.namedOtherBy(&e) {
		return internal(c, fmt.Errorf("worker reply names another call: sessionid %q, replyid %q, toolcallid %q", e.SessionID, e.ReplyID, e.ToolCallID)), nil, ""
	}
	if xr.Output == nil {
		xr.Output = []bus.Block{}
	}
	for i, bl := range xr.Output {
		if err := checkBlock(bl); err != nil {
			return bus.ErrorResult(c, bus.CodeToolError, fmt.Sprintf("Error: the tool returned an invalid output block %d: %v", i, err)), nil, ""
		}
	}
	res = bus.Result{ID: c.ID, Name: c.Name, State: xr.State, Output: xr.Output, Metadata: xr.Metadata}
	if len(xr.StatePatch) > 0 && string(xr.StatePatch) != "null" {
		patch = xr.StatePatch
	}
	switch xr.State {
	case bus.StateSuccess:
	case bus.StateError:
		fail(&res, bus.CodeToolError, toolFailedText)
	case bus.StateInterrupted:
		// A cancel reaches worker and router at once: one text (protocol 3.5).
		if !bus.ValidID(xr.Cancel) {
			xr.Cancel = "" // none, or not one a worker names (1.30)
		}
		return interrupted(c), patch, xr.Cancel
	default:
		return internal(c, fmt.Errorf("worker returned state %q", xr.State)), patch, ""
	}
	return res, patch, ""
}

// execReplyChecked decodes a worker's reply in full: its result, or the call's.
func execReplyChecked(c bus.Call, resp *nats.Msg, e *bus.Event) (bus.ExecResult, *bus.Result) {
	refuse := func(r bus.Result) (bus.ExecResult, *bus.Result) { return bus.ExecResult{}, &r }
	if err := bus.DecodeTo(resp, e); err != nil {
		return refuse(internal(c, fmt.Errorf("worker reply: %w", err)))
	}
	if e.Type == bus.TypeError {
		var be bus.Error
		_ = e.DataAs(&be)
		if be.Code == bus.CodeBusy || be.Code == bus.CodeUnavailable {
			// At capacity, or its definition was rejected: the call never ran.
			return refuse(bus.ErrorResult(c, bus.CodeUnavailable, fmt.Sprintf("ToolUnavailableError: the worker that took the call of '%s' could not run it: %s", c.Name, be.Message)))
		}
		return refuse(internal(c, fmt.Errorf("worker refused the call: %s", be.Error())))
	}
	var xr bus.ExecResult
	if e.Type != bus.TypeExecResult {
		return refuse(internal(c, fmt.Errorf("worker replied with %q", e.Type)))
	}
	if err := xr.FromEvent(e); err != nil {
		return refuse(internal(c, err))
	}
	return xr, nil
}

// toolFailedText is an error result's text when the tool gave none.
const toolFailedText = "Error: the tool failed without saying why."

// fail makes res an error result with code, its message the output's text,
// or fallback put first when it has none (docs/protocol.md 3.3).
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
// session's agent state by compare-and-set, past ctx's end too.
func patchState(ctx context.Context, gs *groups.Store, session string, def *bus.ToolDef, patch json.RawMessage) error {
	if !def.StateInjected {
		return bus.Errorf(bus.CodeToolError, "Error: the tool returned a state_patch but is not registered with state_injected; the patch was not applied.")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := gs.Update(ctx, session, func(s *groups.Session) error {
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

// execWatch is an exec request in flight, watched for a vanished worker.
type execWatch struct {
	tool       string
	call       callRef // its key built only when the watchdog asks (key)
	since      time.Time
	cancel     stopper
	vanished   atomic.Bool // set by the watchdog before it cancels
	prev, next *execWatch  // in execWatches' list, under its lock
}

// execWatches is the exec requests in flight (watchWorkers), a list: no map writes.
type execWatches struct {
	mu   sync.Mutex
	head *execWatch
	tick time.Time // the watchdog's last round (stalled)
}

// callRef names a call: its session, its batch's reply id and its id.
type callRef struct{ session, replyID, id string }

// key is the call's ledger and P_parked key (bus.CallKey).
func (c callRef) key() string { return bus.CallKey(c.session, c.replyID, c.id) }

// namedOtherBy reports whether event e names another call than c.
func (c callRef) namedOtherBy(e *bus.Event) bool {
	differs := func(got, want string) bool { return got != "" && got != want }
	return differs(e.SessionID, c.session) || differs(e.ReplyID, c.replyID) || differs(e.ToolCallID, c.id)
}

// add watches w, the request of tool's call in flight until cancel.
func (x *execWatches) add(w *execWatch, tool string, call callRef, cancel stopper) *execWatch {
	w.tool, w.call, w.since, w.cancel = tool, call, time.Now(), cancel
	w.vanished.Store(false)
	x.mu.Lock()
	w.prev, w.next = nil, x.head
	if x.head != nil {
		x.head.prev = w
	}
	x.head = w
	x.mu.Unlock()
	return w
}

func (x *execWatches) remove(w *execWatch) {
	x.mu.Lock()
	if w.prev != nil {
		w.prev.next = w.next
	} else if x.head == w {
		x.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	x.mu.Unlock()
}

// watchWorkers runs every heartbeat: an exec request older than three
// heartbeats whose call no live worker lists in flight lost its worker, and
// ends now instead of at its timeout (registry.MayHold: a worker that does
// not list its calls holds them all).
func (x *execWatches) watchWorkers(now time.Time, hb time.Duration, reg *registry.Registry, log *slog.Logger) {
	if x.stalled(now, hb) || reg.Troubled() {
		return // beats may be missing for want of a bucket, not of workers
	}
	x.mu.Lock()
	var lost []*execWatch
	for w := x.head; w != nil; w = w.next {
		if now.Sub(w.since) > 3*hb && !reg.MayHold(w.tool, w.call.key()) {
			lost = append(lost, w)
		}
	}
	x.mu.Unlock()
	for _, w := range lost {
		log.Warn("router: worker vanished mid-call", "tool", w.tool, "call", w.call.key())
		w.vanished.Store(true)
		w.cancel.stop()
	}
}

// stalled records a watchdog round at now and reports whether the round
// before it was more than two heartbeats earlier: the router itself was
// held (a GC pause, a starved process, a suspended VM), so beats that came
// meanwhile may not be read yet, and a live worker must not be taken for
// gone; the next round, a heartbeat later, reads them.
func (x *execWatches) stalled(now time.Time, hb time.Duration) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	late := !x.tick.IsZero() && now.Sub(x.tick) > 2*hb
	x.tick = now
	return late
}

// workQueue is the executor of durable tools (docs/protocol.md 5.8): the
// call is claimed in the ledger and published to the tool's work queue; any
// router records the worker's result in the ledger entry (one result, however
// many deliveries), where the publishing router reads it.
type workQueue struct {
	*wire    // its source is the work messages'
	js       jetstream.JetStream
	led      *ledger.Ledger
	progress *replies.Mux // where the workers' progress comes (progress_inbox, progress.go)
}

// Exec claims j in the ledger and queues it.
func (x workQueue) Exec(ctx context.Context, j *job) bus.Result {
	l := x.led
	deadline, timeout := callDeadline(time.Now(), j.tool.Def.TimeoutMS, j.deadline)
	if timeout <= 0 {
		return timeoutResult(j.call, 0)
	}
	return l.Claimed(ctx, ledgerCall(j, timeout), func(claim ledger.Entry) bus.Result {
		// The worker's deadline is the one the ledger judges its result by
		// (its claim's, taken after deadline): a failure the worker sends at
		// its deadline is then the timeout (5.8), whatever the claim took.
		deadline := cmp.Or(claim.Deadline, deadline)
		key := j.key()
		inbox := "" // the call's progress comes to a wait of its own (progress.go), for as long as the call runs here
		j.progress = progressGate{}
		if w, err := x.progress.AwaitTagged(j); err == nil {
			defer x.progress.Done(w, false)
			inbox = w.Inbox()
		}
		if err := x.publish(ctx, j, deadline, inbox); err != nil {
			x.log.Warn("router: durable call not queued", "key", key, "err", err)
			l.Abandon(key, claim.Claim)
			if l.Health().Note(err) {
				return ledger.StoreFull(j.call, l.Health())
			}
			return ledger.Unavailable(j.call)
		}
		wctx := j.attemptContext(ctx, deadline.Add(ledger.TimeoutGrace))
		defer wctx.stop()
		if res, cancel, ok := l.Await(wctx, key); ok {
			j.cancelledBy = cancel // as on an exec reply: the next run waits for it (awaitCancels)
			return res
		}
		// No result by the deadline, or cancelled, or cut off: so it ends
		// in the ledger, unless a result got in first.
		end := timeoutResult(j.call, timeout)
		switch {
		case context.Cause(ctx) == errDrainDeadline:
			return ledger.UnknownOutcome(j.call) // the queue still holds it: another router records its result
		case ctx.Err() != nil:
			end = interrupted(j.call)
		}
		return l.End(key, claim, end)
	})
}

// publish queues the call under its key as message id (a retry is one
// message), its progress to come to inbox ("": none).
func (x workQueue) publish(ctx context.Context, j *job, deadline time.Time, inbox string) error {
	var e bus.Event
	execEventTo(&e, ctx, x.source, j, bus.ExecRequest{Call: j.call, User: j.user, Context: j.context, Attempt: 1, ProgressInbox: inbox}, deadline, nil)
	m, err := e.Msg(x.subj.Workers.Work(j.call.Name))
	if err != nil {
		return err
	}
	return store.Retry(ctx, store.Bounded, func(ctx context.Context) error {
		_, err := x.js.PublishMsg(ctx, m, jetstream.WithMsgID(j.key()))
		return err
	})
}

// durableResults records durable results from P.result.<tool> (protocol 5.8).
type durableResults struct {
	*wire
	reg  *registry.Registry
	led  *ledger.Ledger
	seal func(session, key string, res bus.Result, patch json.RawMessage) (bus.Result, json.RawMessage)
}

func (r *durableResults) onResult(m *nats.Msg) {
	tool, e, err := r.decodeCall(m, "result", bus.TypeExecResult, "a durable result")
	if err != nil {
		r.reject(m, err)
		return
	}
	call := bus.Call{ID: e.ToolCallID, Name: tool}
	res, _, by := execReply(call, callRef{e.SessionID, e.ReplyID, e.ToolCallID}, m)
	res, _ = r.seal(e.SessionID, bus.CallKey(e.SessionID, e.ReplyID, e.ToolCallID), res, nil)
	var timeout time.Duration
	if t, ok := r.reg.Lookup(tool); ok {
		timeout = time.Duration(t.Def.TimeoutMS) * time.Millisecond
	}
	ctx, cancel := r.landing()
	defer cancel()
	// As for a core request: a failure at or past the deadline is its timeout.
	ack, err := r.led.RecordResult(ctx, bus.CallKey(e.SessionID, e.ReplyID, e.ToolCallID), res, timeoutResult(call, timeout), by)
	r.answer(m, bus.TypeExecRecorded, ack, err)
}
