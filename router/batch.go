package router

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	fastjson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/external"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/schemas"
)

// batch is one model turn in flight on this router: a new batch, or the
// continuation of one whose parked calls have all been answered.
type batch struct {
	r        *Router
	session  string
	replyID  string
	trace    [2]string // traceparent, tracestate
	expiry   string
	deadline time.Time // from expirytime; zero when absent
	data     bus.Batch
	req      *groups.Request
	calls    []*callState
	ctx      context.Context
	cancel   context.CancelFunc
	start    time.Time

	cont    *external.Batch // the continuation record once the batch parked
	parked  []bus.Parked    // what this router parked (and queued) last
	resumed bool            // a continuation: its reply was sent long ago
	silent  bool            // runs one confirmed call whose result complete publishes: no events

	// deferEvents holds back the call.result events of the final run, so
	// the reply (which the agent waits for) goes out first; done sends them.
	deferEvents bool
	held        []*callState
	lease       bool // this router owns b.cont and renews its lease

	sent []*sentEvent // events published and not yet known to be stored

	mu         sync.Mutex     // guards callState.result/raw/cancel, deferEvents, held, sent
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
	cancel context.CancelFunc
}

// safe is callState.safe under the batch's lock.
func (b *batch) safe(c *callState) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return c.safe()
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
	b, err := r.newBatch(m)
	if err != nil {
		r.reject(m, err)
		return
	}
	r.m.Batches.Inc()
	r.track(b)
	defer r.untrack(b)
	if err := r.groups.Touch(b.ctx, b.session); err != nil {
		r.log.Warn("router: session not touched", "session", b.session, "err", err)
	}
	complete := b.run(0)
	if b.cutOff() {
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
		buf = append(append(buf, pj...), '}')
		var e *bus.Event
		if e, err = b.r.event(b, bus.TypeCallReply, "", json.RawMessage(buf)); err == nil {
			err = bus.Publish(b.r.nc, subject, e)
		}
	}
	if err != nil {
		b.r.log.Warn("router: reply failed", "session", b.session, "reply", b.replyID, "err", err)
	}
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

// newBatch decodes and checks a batch; errors are bad_event or bad_request.
func (r *Router) newBatch(m *nats.Msg) (*batch, error) {
	e, err := r.decode(m, "call", bus.TypeCallBatch)
	if err != nil {
		return nil, err
	}
	if !bus.ValidID(e.ID) {
		return nil, bus.Errorf(bus.CodeBadEvent, "id (the reply id) %q must match ^[A-Za-z0-9_-]{1,128}$", e.ID)
	}
	var data bus.Batch
	if err := e.DataAs(&data); err != nil {
		return nil, err
	}
	n := len(data.Calls)
	if n == 0 {
		return nil, bus.Errorf(bus.CodeBadRequest, "the batch has no calls")
	}
	if n > bus.MaxCalls {
		return nil, bus.Errorf(bus.CodeBadRequest, "the batch has %d calls; at most %d are allowed", n, bus.MaxCalls)
	}
	seen := make(map[string]struct{}, n)
	for _, c := range data.Calls {
		if !bus.ValidID(c.ID) {
			return nil, bus.Errorf(bus.CodeBadEvent, "call id %q must match ^[A-Za-z0-9_-]{1,128}$", c.ID)
		}
		if _, dup := seen[c.ID]; dup {
			return nil, bus.Errorf(bus.CodeBadRequest, "call id %q appears twice in the batch", c.ID)
		}
		seen[c.ID] = struct{}{}
	}
	return r.makeBatch(e.SessionID, e.ID, e.TraceParent, e.TraceState, e.ExpiryTime, data)
}

// makeBatch builds a batch from checked parts; it serves new batches and
// continuations alike.
func (r *Router) makeBatch(session, replyID, traceParent, traceState, expiry string, data bus.Batch) (*batch, error) {
	b := &batch{r: r, session: session, replyID: replyID, trace: [2]string{traceParent, traceState}, expiry: expiry, data: data,
		start: time.Now()}
	if expiry != "" {
		t, err := time.Parse(time.RFC3339Nano, expiry)
		if err != nil {
			return nil, bus.Errorf(bus.CodeBadEvent, "expirytime %q is not RFC 3339", expiry)
		}
		b.deadline = t
	}
	var err error
	if b.req, err = groups.CheckRequest(data.Request); err != nil {
		return nil, err
	}
	b.calls = make([]*callState, len(data.Calls))
	for i, c := range data.Calls {
		b.calls[i] = &callState{call: c}
	}
	b.ctx, b.cancel = context.WithCancel(r.base)
	return b, nil
}

// run executes the batch from call index start: calls are resolved and
// validated, then split into maximal runs of concurrency-safe calls and
// single unsafe calls; runs go one after another, the calls of a safe run
// in parallel. A run that parks calls holds back the rest of the batch:
// run returns, and whichever router records the last answer resumes it.
// It reports whether every call has its result; the caller then sends the
// reply (if any) and batch.done, in that order.
//
// A reset_tools call or a skill load changes what later calls resolve to,
// so they are resolved again after it.
func (b *batch) run(start int) bool {
	// Activation and permissions are shared by every router at once
	// (PROTOCOL.md 4.2): the session is read from KV once per run of the
	// batch, into the cache that resolution and permission decisions read,
	// so a write acknowledged through another router a moment ago counts.
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	b.r.groups.Refresh(ctx, b.session)
	cancel()
	b.resolveFrom(start)
	for i := start; i < len(b.calls); {
		if b.cutOff() {
			return false
		}
		j := i + 1
		if b.safe(b.calls[i]) {
			for j < len(b.calls) && b.safe(b.calls[j]) {
				j++
			}
		}
		b.mu.Lock()
		b.deferEvents = j == len(b.calls) && j-i == 1 && !b.resumed
		b.mu.Unlock()
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

// flushHeld publishes the result events held back for the reply.
func (b *batch) flushHeld() {
	b.publishing.Wait()
	b.mu.Lock()
	held := b.held
	b.held, b.deferEvents = nil, false
	b.mu.Unlock()
	for _, c := range held {
		b.r.publishEvent(b, bus.TypeCallResult, c.call.ID, b.encoded(c))
	}
}

// done publishes batch.done with every result in call order, after any
// held result events.
func (b *batch) done() {
	b.flushHeld()
	buf := append(make([]byte, 0, 256), `{"results":[`...)
	for i, c := range b.calls {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b.encoded(c)...)
	}
	buf = append(buf, "]}"...)
	b.r.publishEvent(b, bus.TypeBatchDone, "", json.RawMessage(buf))
	b.stored()
	if b.cont != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.r.parked.DeleteBatch(ctx, b.cont); err != nil {
			b.r.log.Warn("router: continuation not removed", "session", b.session, "reply", b.replyID, "err", err)
		}
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

// runCalls runs one run (next is the index after it). Calls that cannot run
// finish at once; the others are decided by the permission engine, then
// parked or executed, those of a safe run in parallel. It reports false when
// calls parked and the batch must wait.
func (b *batch) runCalls(run []*callState, next int) bool {
	sess := b.r.groups.Session(b.session)
	var execs, parks []*callState
	var kinds []parkSpec
	for _, c := range run {
		b.mu.Lock()
		finished := c.result != nil
		b.mu.Unlock()
		switch {
		case finished:
		case b.cancelled(c.call.ID):
			b.finish(c, interrupted(c.call))
		case c.early != nil:
			b.finish(c, *c.early)
		default:
			spec, res := b.decide(sess, c)
			switch {
			case res != nil:
				b.finish(c, *res)
			case spec.kind != "":
				parks, kinds = append(parks, c), append(kinds, spec)
			default:
				execs = append(execs, c)
			}
		}
	}
	if len(parks) > 0 {
		parks, kinds = b.reuseParked(parks, kinds)
	}
	if len(parks) > 0 && !b.park(parks, kinds, next) {
		return false // a re-sent batch found the first one parked
	}
	if len(execs) == 1 {
		b.execute(execs[0])
	} else {
		var wg sync.WaitGroup
		for _, c := range execs {
			wg.Add(1)
			go func() { defer wg.Done(); b.execute(c) }()
		}
		wg.Wait()
	}
	if len(parks) == 0 {
		return true
	}
	return b.settleRun(next)
}

// resolve finds what the call runs and validates its input; a call that
// cannot run gets its early result, reported when its run comes.
func (b *batch) resolve(view *groups.View, c *callState) {
	c.early, c.input = nil, nil
	c.target = b.resolveName(view, c.call.Name)
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
	b.report(c, res)
	return true
}

// report publishes a finished call's io.toolbus.call.result and counts it.
func (b *batch) report(c *callState, res bus.Result) {
	b.mu.Lock()
	hold := b.deferEvents
	if hold {
		b.held = append(b.held, c)
	}
	b.mu.Unlock()
	if !hold && !b.silent && !b.cutOff() {
		b.r.publishEvent(b, bus.TypeCallResult, c.call.ID, b.encoded(c))
	}
	tool := metrics.UnknownTool
	if c.target.Code == "" || c.target.Code == bus.CodeInactiveTool || c.target.Code == bus.CodeUnavailable {
		tool = c.call.Name
	}
	b.r.m.Calls.WithLabelValues(tool, res.State).Inc()
	if !b.resumed {
		b.r.m.Latency.WithLabelValues(tool).Observe(metrics.Since(b.start))
	}
}

// event builds an event about batch b from this router.
func (r *Router) event(b *batch, typ, callID string, data any) (*bus.Event, error) {
	e, err := bus.NewEvent(typ, r.source, data)
	if err != nil {
		return nil, err
	}
	e.SessionID, e.ReplyID, e.TraceParent, e.TraceState = b.session, b.replyID, b.trace[0], b.trace[1]
	if callID != "" {
		e.Subject, e.ToolCallID = callID, callID
	}
	return e, nil
}

// publishEvent publishes an event on the batch's session events subject,
// through the events stream; stored waits for it.
func (r *Router) publishEvent(b *batch, typ, callID string, data any) {
	e, err := r.event(b, typ, callID, data)
	var m *nats.Msg
	if err == nil {
		m, err = e.Msg(r.subj.Events(b.session))
	}
	if err != nil {
		r.log.Warn("router: event not published", "type", typ, "session", b.session, "err", err)
		return
	}
	ev := r.events.publish(m, e.ID)
	b.mu.Lock()
	b.sent = append(b.sent, ev)
	b.mu.Unlock()
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
