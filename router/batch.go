package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	fastjson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/external"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/metrics"
)

// The pipeline of one batch, each step in its own place:
//
//	checkTurn (turn.go)         decode and check the event
//	run: session snapshot       one KV read of the session per run
//	resolveFrom → validate      what each call runs, its input checked (validate.go)
//	nextRun (plan.go)           the run plan of docs/protocol.md 5.2
//	decide (decide.go)          permissions: run, deny, or park
//	park / settleRun (park.go)  parked calls and the continuation, owned by external
//	execute → runTool (exec.go) the executor, through the ledger (ledger.go) when not read-only
//	finish → report             the call's result event, once
//	done / reply                batch.done, then the reply
//
// A new batch, a re-sent one (the ledger and the continuation answer for
// what ran before: dedupe.go), a resumed continuation and a repaired one
// go through the same steps from the call they start at.

// batch is one model turn in flight on this router: a new batch, or the
// continuation of one whose parked calls have all been answered.
type batch struct {
	r *Router
	turn
	calls  []*callState
	ctx    context.Context
	cancel context.CancelFunc
	// start is when the batch arrived; zero for a continuation, whose
	// latency was counted when it parked.
	start time.Time

	cont   *external.Batch // the continuation record once the batch parked
	parked []bus.Parked    // what this router parked (and queued) last

	sent []*sentEvent // events published and not yet known to be stored

	mu         sync.Mutex     // guards callState.result/raw/cancel and sent
	publishing sync.WaitGroup // result events set by interrupt, not yet published
}

// callState is one call of a batch.
type callState struct {
	call   bus.Call
	target groups.Resolved // what the call runs
	input  json.RawMessage // the validated input object
	early  *bus.Result     // the result when the call cannot run
	result *bus.Result     // set once, when the call finishes
	raw    json.RawMessage // result encoded once, for the event, the reply and batch.done
	size   int64           // bytes its result takes in the batch's aggregate messages (fit.go)
	cancel context.CancelFunc
}

// newBatch starts the batch of a turn.
func (r *Router) newBatch(t turn, start time.Time) *batch {
	b := &batch{r: r, turn: t, start: start, calls: make([]*callState, len(t.data.Calls))}
	for i, c := range t.data.Calls {
		b.calls[i] = &callState{call: c}
	}
	b.ctx, b.cancel = context.WithCancel(r.base)
	return b
}

// fromContinuation rebuilds a batch from its continuation, with the
// results recorded so far.
func (r *Router) fromContinuation(cont *external.Batch) (*batch, error) {
	t, err := newTurn(cont.Session, cont.ReplyID, [2]string{cont.TraceParent, cont.TraceState}, cont.Expiry, cont.Data)
	if err != nil {
		return nil, err
	}
	b := r.newBatch(t, time.Time{})
	b.cont = cont
	for _, c := range b.calls {
		if res, ok := cont.Results[c.call.ID]; ok {
			c.result = &res
		}
	}
	return b, nil
}

// safe is callState.safe under the batch's lock.
func (b *batch) safe(k int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[k].safe()
}

// safe reports whether the call may run beside others: unknown and failed
// calls and request-scoped external tools count as safe, reset_tools never.
func (c *callState) safe() bool {
	switch {
	case c.result != nil, c.early != nil, c.target.External != nil:
		return true
	case c.target.Reset:
		return false
	}
	return c.target.Tool.Def.ConcurrencySafe
}

func (r *Router) onBatch(m *nats.Msg) {
	e, err := r.decode(m, "call", bus.TypeCallBatch)
	var t turn
	if err == nil {
		t, err = checkTurn(e, r.cfg.Limits)
	}
	if err == nil {
		t.data.User, err = r.identify(t.session, t.data.User)
	}
	if err != nil {
		r.reject(m, err)
		return
	}
	b := r.newBatch(t, time.Now())
	r.m.Batches.Inc()
	r.track(b)
	defer r.untrack(b)
	if err := r.groups.Touch(b.ctx, b.session); err != nil {
		r.log.Warn("router: session not touched", "session", b.session, "err", err)
	}
	complete := b.run(0)
	if b.cutOff() {
		b.release()
		return // no reply: the agent re-sends, and the ledger answers
	}
	// Nothing runs here any more: a cancel from now on is for the
	// continuation (parked and queued calls), which cancelParked handles
	// once. Left tracked until the reply, the batch would also interrupt
	// them itself, and each would get two results.
	r.untrack(b)
	if complete {
		b.done()
	} else {
		b.stored()
	}
	// call.parked and batch.done are in the events stream before the
	// reply: an agent that reconnects after it finds them there.
	if m.Reply != "" {
		b.reply(m.Reply)
	}
}

// run executes the batch from call index start: calls are resolved and
// validated, then split into runs (nextRun); runs go one after another,
// the calls of a safe run in parallel. A run that parks calls holds back
// the rest of the batch: run returns, and whichever router records the
// last answer resumes it. It reports whether every call has its result;
// the caller then sends batch.done and the reply (if any).
func (b *batch) run(start int) bool {
	// Activation and permissions are shared by every router at once
	// (docs/protocol.md 4.2): the session is read from KV once per run of the
	// batch, into the cache that resolution and permission decisions read,
	// so a write acknowledged through another router a moment ago counts.
	// A new batch that carries a session revision (docs/protocol.md 4.2)
	// skips the read when the cache is at least that new and the sessions
	// watch knows of nothing newer (sessions.go).
	var rev uint64
	if start == 0 && !b.start.IsZero() {
		rev = b.data.SessionRev
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	b.r.sessions.snapshot(ctx, b.session, rev)
	cancel()
	b.resolveFrom(start)
	for i := start; i < len(b.calls); {
		if b.cutOff() {
			return false
		}
		j := nextRun(i, len(b.calls), b.safe)
		if !b.runCalls(b.calls[i:j], j) {
			return false // parked: the continuation takes it from here
		}
		if t := b.calls[i].target; (t.Reset || t.Skill) && b.calls[i].early == nil {
			b.resolveFrom(j)
		}
		i = j
	}
	return true
}

// cutOff reports whether the router's drain deadline cut the batch off:
// it gets no more events and no reply.
func (b *batch) cutOff() bool { return context.Cause(b.ctx) == errDrainDeadline }

// release lets go of the lease of a batch cut off by the drain deadline,
// so that another router takes its continuation over.
func (b *batch) release() {
	if b.cont != nil {
		b.r.parked.Release(b.cont)
	}
}

// resolveFrom resolves the calls from index i on that have no result yet,
// against the session as the cache holds it (run refreshed it from KV). A
// call that resolves to an unknown or unavailable tool is resolved again
// after the tool is read from KV: its registration may have been
// acknowledged through another router a moment ago.
func (b *batch) resolveFrom(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	view := b.r.groups.View(b.r.reg, b.r.groups.Session(b.session), b.req)
	var missing []string
	for _, c := range b.calls[i:] {
		if c.result == nil {
			b.resolve(view, c)
			if code := c.target.Code; (code == bus.CodeUnknownTool || code == bus.CodeUnavailable) &&
				bus.ValidName(c.call.Name) && !slices.Contains(missing, c.call.Name) {
				missing = append(missing, c.call.Name)
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	for _, name := range missing {
		if err := b.r.reg.Refresh(ctx, name); err != nil {
			b.r.log.Warn("router: tool not read from KV", "tool", name, "err", err)
		}
	}
	view = b.r.groups.View(b.r.reg, b.r.groups.Session(b.session), b.req)
	for _, c := range b.calls[i:] {
		if c.result == nil && slices.Contains(missing, c.call.Name) {
			b.resolve(view, c)
		}
	}
}

// resolve finds what the call runs and validates its input; a call that
// cannot run gets its early result, reported when its run comes.
func (b *batch) resolve(view *groups.View, c *callState) {
	c.target = b.resolveName(view, c.call.Name)
	c.input, c.early = validate(c.call, c.target)
	if c.early != nil && c.target.Code == bus.CodeUnavailable {
		c.early = storeFullOr(c.call, b.r.store.Health, c.early)
	}
}

// runCalls runs one run (next is the index after it). Calls that cannot run
// finish at once; the others are decided by the permission engine, then
// parked or executed, those of a safe run in parallel. It reports false when
// calls parked and the batch must wait.
func (b *batch) runCalls(run []*callState, next int) bool {
	pc := permissionContext(b.r.groups.Session(b.session))
	var execs, parks []*callState
	var specs []parkSpec
	for _, c := range run {
		b.mu.Lock()
		finished := c.result != nil
		b.mu.Unlock()
		switch {
		case finished:
		case b.cont != nil && b.cont.IsCancelled(c.call.ID):
			b.finish(c, interrupted(c.call))
		case c.early != nil:
			b.finish(c, *c.early)
		default:
			spec, res := decide(pc, c.target, c.call, c.input)
			switch {
			case res != nil:
				b.finish(c, *res)
			case spec.kind != "":
				parks, specs = append(parks, c), append(specs, spec)
			default:
				execs = append(execs, c)
			}
		}
	}
	if len(parks) > 0 {
		parks, specs = b.reuseParked(parks, specs)
	}
	if len(parks) > 0 && !b.park(parks, specs, next) {
		return false // a re-sent batch found the first one parked
	}
	if len(execs) == 1 {
		b.execute(execs[0])
	} else {
		var wg sync.WaitGroup
		for _, c := range execs {
			wg.Go(func() { b.execute(c) })
		}
		wg.Wait()
	}
	if len(parks) == 0 {
		return true
	}
	return b.settleRun(next)
}

// execute runs c: the router's own built-ins here, a tool through the
// executor, and finishes it.
func (b *batch) execute(c *callState) {
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
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
	default:
		res = b.r.runTool(ctx, b.job(c))
	}
	b.finish(c, res)
}

// job is what the executor needs of call c.
func (b *batch) job(c *callState) *job {
	return &job{session: b.session, replyID: b.replyID, trace: b.trace, deadline: b.deadline,
		user: b.data.User, context: b.data.Context,
		call: bus.Call{ID: c.call.ID, Name: c.call.Name, Input: c.input}, tool: c.target.Tool}
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

func unavailable(c bus.Call) bus.Result {
	return bus.ErrorResult(c, bus.CodeUnavailable, fmt.Sprintf("ToolUnavailableError: No live worker serves the tool '%s' right now.", c.Name))
}

// finish records c's result once and publishes its io.toolbus.call.result.
// It reports false when the call already had a result (e.g. interrupted).
func (b *batch) finish(c *callState, res bus.Result) bool {
	res = b.fit(c, res)
	b.mu.Lock()
	if c.result != nil {
		b.mu.Unlock()
		return false
	}
	c.result = &res
	b.mu.Unlock()
	b.report(c, res)
	return true
}

// report publishes a finished call's io.toolbus.call.result when it gets
// one (ownEvent), and counts it.
func (b *batch) report(c *callState, res bus.Result) {
	if b.ownEvent(res) && !b.cutOff() {
		b.publishEvent(bus.TypeCallResult, c.call.ID, b.encoded(c))
	}
	tool := metrics.UnknownTool
	if c.target.Code == "" || c.target.Code == bus.CodeInactiveTool || c.target.Code == bus.CodeUnavailable {
		tool = c.call.Name
	}
	b.r.m.Calls.WithLabelValues(tool, res.State).Inc()
	if !b.start.IsZero() {
		b.r.m.Latency.WithLabelValues(tool).Observe(metrics.Since(b.start))
	}
}

// ownEvent reports whether a result gets an io.toolbus.call.result of its
// own (docs/protocol.md 3.4): when the batch asks for one per call, when it
// finishes after the reply (a continuation's calls), and when a cancel
// ended it. Any other result comes back in the reply, and batch.done,
// stored before the reply, carries it: one stored event per batch.
func (b *batch) ownEvent(res bus.Result) bool {
	return b.data.Events == bus.EventsCalls || b.start.IsZero() || res.State == bus.StateInterrupted
}

// encoded returns the JSON of c's result, encoding it the first time.
func (b *batch) encoded(c *callState) json.RawMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.raw == nil {
		raw, err := fastjson.Marshal(c.result)
		if err != nil {
			raw, _ = fastjson.Marshal(internal(c.call, err))
		}
		c.raw = raw
	}
	return c.raw
}

// done publishes batch.done with every result in call order, waits until
// the events stream holds the batch's events, and removes the
// continuation of a batch that parked.
func (b *batch) done() {
	b.publishing.Wait()
	buf := append(make([]byte, 0, 256), `{"results":[`...)
	for i, c := range b.calls {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b.encoded(c)...)
	}
	buf = append(buf, "]}"...)
	b.publishEvent(bus.TypeBatchDone, "", json.RawMessage(buf))
	b.stored()
	if b.cont != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 10*time.Second)
		defer cancel()
		if err := b.r.parked.Finish(ctx, b.cont); err != nil {
			b.r.log.Warn("router: continuation not removed", "session", b.session, "reply", b.replyID, "err", err)
		}
	}
}

// reply sends io.toolbus.call.reply: the finished results in call order
// and the parked calls. Each result is encoded once, for its event, the
// reply and batch.done alike.
func (b *batch) reply(subject string) {
	buf := make([]byte, 0, 256)
	buf = append(buf, `{"results":[`...)
	n := 0
	for _, c := range b.calls {
		if c.result == nil {
			continue
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b.encoded(c)...)
		n++
	}
	buf = append(buf, `],"parked":`...)
	parked := b.parked
	if parked == nil {
		parked = []bus.Parked{}
	}
	pj, err := fastjson.Marshal(parked)
	if err == nil {
		buf = append(buf, pj...)
		if rev := b.r.sessions.revision(b.session); rev > 0 {
			buf = strconv.AppendUint(append(buf, `,"sessionrev":`...), rev, 10)
		}
		buf = append(buf, '}')
		var e *bus.Event
		if e, err = b.event(bus.TypeCallReply, "", json.RawMessage(buf)); err == nil {
			err = bus.Publish(b.r.nc, subject, e)
		}
	}
	if err != nil {
		b.r.log.Warn("router: reply failed", "session", b.session, "reply", b.replyID, "err", err)
	}
}

// track makes a batch reachable by cancels; untrack forgets it.
func (r *Router) track(b *batch) {
	r.mu.Lock()
	r.batches[external.BatchKey(b.session, b.replyID)] = b
	r.mu.Unlock()
}

func (r *Router) untrack(b *batch) {
	key := external.BatchKey(b.session, b.replyID)
	r.mu.Lock()
	if r.batches[key] == b {
		delete(r.batches, key)
	}
	r.mu.Unlock()
	b.cancel()
}

// event builds an event about the batch from this router.
func (b *batch) event(typ, callID string, data any) (*bus.Event, error) {
	return b.r.eventFor(typ, b.session, b.replyID, callID, b.trace, data)
}

// eventFor builds an event about a call or batch from this router.
func (r *Router) eventFor(typ, session, replyID, callID string, trace [2]string, data any) (*bus.Event, error) {
	e, err := bus.NewEvent(typ, r.source, data)
	if err != nil {
		return nil, err
	}
	e.SessionID, e.ReplyID, e.TraceParent, e.TraceState = session, replyID, trace[0], trace[1]
	if callID != "" {
		e.Subject, e.ToolCallID = callID, callID
	}
	return e, nil
}

// publishEvent publishes an event on the batch's session events subject,
// through the events stream; stored waits for it.
func (b *batch) publishEvent(typ, callID string, data any) {
	ev, err := b.r.publishEvent(typ, b.session, b.replyID, callID, b.trace, data)
	if err != nil {
		b.r.log.Warn("router: event not published", "type", typ, "session", b.session, "err", err)
		return
	}
	b.mu.Lock()
	b.sent = append(b.sent, ev)
	b.mu.Unlock()
}

// publishEvent publishes an event on a session's events subject, through
// the events stream, and returns at once; events.stored waits for it.
func (r *Router) publishEvent(typ, session, replyID, callID string, trace [2]string, data any) (*sentEvent, error) {
	e, err := r.eventFor(typ, session, replyID, callID, trace, data)
	if err != nil {
		return nil, err
	}
	m, err := e.Msg(r.subj.Events(session))
	if err != nil {
		return nil, err
	}
	return r.events.publish(m, e.ID), nil
}

// stored waits until the events stream holds every event the batch has
// published so far.
func (b *batch) stored() {
	b.mu.Lock()
	sent := b.sent
	b.sent = nil
	b.mu.Unlock()
	if len(sent) == 0 {
		return
	}
	ctx, cancel := landing()
	defer cancel()
	_ = b.r.events.stored(ctx, sent)
}
