package router

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/parked"
)

// batch is one model turn in flight on this router: a new batch, or the
// continuation of one whose parked calls have all been answered. Each goes
// through the steps of the pipeline (docs/router.md "Where each step
// lives") from the call it starts at.
type batch struct {
	p *pipeline
	turn
	calls    []*callState
	one      [1]*callState // calls of a batch of one
	oneState [1]callState
	key      string // session/reply id, once tracked (cancel.go)
	// ctx is the router's (pipeline.base): each call has its own context
	// (callContext), and a context of the batch's own would cost
	// allocations and end nothing more.
	ctx   context.Context
	start time.Time // when the batch arrived; zero for a continuation

	cont   *parked.Batch // the continuation record once the batch parked
	parked []bus.Parked  // what this router parked (and queued) last

	sent   []*sentEvent     // events published and not yet known to be stored
	audits []*audit.Pending // audit records on their way to P_AUDIT (chain.go)
	// results is the unclosed {"results":[...] of every call, which a
	// read-only batch's announced batch.done leaves for the reply to
	// finish (reportStep.done): nil when the reply encodes its own.
	results []byte

	mu         sync.Mutex     // guards callState.result/raw/cancel, sent and audits
	publishing sync.WaitGroup // result events set by interrupt, not yet published
}

// callState is one call of a batch.
type callState struct {
	call      bus.Call
	target    groups.Resolved // what the call runs
	input     json.RawMessage // the validated input object
	early     *bus.Result     // the result when the call cannot run
	rule      string          // why the permission engine decided as it did (decide), for the audit record
	limitRule string          // the limit rule that refused the call (quotas.refuse)
	result    *bus.Result     // set once, when the call finishes
	settled   bus.Result      // what result points to when settle set it (no allocation of its own)
	raw       json.RawMessage // result encoded once, for the event, the reply and batch.done
	size      int64           // bytes its result takes in the batch's aggregate messages (outputs.go)
	cancel    context.CancelFunc
	job       job           // what the executor chain runs (jobOf)
	admitted  chan struct{} // for jobOf: closed once the call passed the quotas (runCalls)
}

// newBatch starts the batch of a turn on the pipeline.
func (p *pipeline) newBatch(t turn, start time.Time) *batch {
	b := &batch{p: p, turn: t, start: start}
	states, calls := b.oneState[:], b.one[:] // a batch of one call: no allocation of its own
	if n := len(t.data.Calls); n != 1 {
		states, calls = make([]callState, n), make([]*callState, n)
	}
	for i, c := range t.data.Calls {
		states[i].call = c
		calls[i] = &states[i]
	}
	b.calls = calls
	b.ctx = p.base
	return b
}

// fromContinuation rebuilds a batch from its continuation, with the
// results recorded so far.
func (p *pipeline) fromContinuation(cont *parked.Batch) (*batch, error) {
	t, err := newTurn(cont.Session, cont.ReplyID, [2]string{cont.TraceParent, cont.TraceState}, cont.Expiry, cont.Data)
	if err != nil {
		return nil, err
	}
	b := p.newBatch(t, time.Time{})
	b.cont = cont
	for _, c := range b.calls {
		if res, ok := cont.Results[c.call.ID]; ok {
			c.result = &res
		}
	}
	return b, nil
}

// safeAt is callState.safe of b's call k under the batch's lock.
func safeAt(b *batch) func(k int) bool {
	return func(k int) bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.calls[k].safe()
	}
}

// safe reports whether the call may run beside others: unknown and failed
// calls and request-scoped external tools count as safe, reset_tools never.
func (c *callState) safe() bool {
	switch {
	case c.result != nil, c.early != nil, c.target.External != nil:
		return true
	case c.target.Reset, c.target.Search:
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
		t.data.User, err = identify(r.cfg.Identities, t.session, t.data.User)
	}
	if err != nil {
		r.guards.audit.refusedRequest(r.base, r.subj, m.Subject, "call", e, err)
		r.reject(m, err)
		return
	}
	b := r.pipe.newBatch(t, time.Now())
	r.m.Batches.Inc()
	r.batches.track(b)
	defer r.batches.untrack(b)
	if err := b.p.sessions.Touch(b.ctx, b.session); err != nil {
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
	r.batches.untrack(b)
	if complete {
		b.done()
	} else {
		b.stored()
	}
	// call.parked and batch.done are in the events stream before the
	// reply: an agent that reconnects after it finds them there.
	if m.Reply != "" {
		b.p.report.reply(b, m.Reply)
	}
}

// run executes the batch from call index start, run after run (nextRun),
// the calls of a safe run in parallel. A run that parks calls holds back
// the rest of the batch: whichever router records the last answer resumes
// it. It reports whether every call has its result.
func (b *batch) run(start int) bool {
	// The session is read from KV once per run of the batch, so a write
	// acknowledged through another router counts, unless a new batch's
	// sessionrev lets the cache serve (docs/protocol.md 4.2).
	var rev uint64
	if start == 0 && !b.start.IsZero() {
		rev = b.data.SessionRev
	}
	b.p.sessions.Snapshot(b.ctx, b.session, rev)
	b.resolveFrom(start)
	for i := start; i < len(b.calls); {
		if b.cutOff() {
			return false
		}
		j := nextRun(i, len(b.calls), safeAt(b))
		if !b.runCalls(b.calls[i:j], j) {
			return false // parked: the continuation takes it from here
		}
		if t := b.calls[i].target; (t.Reset || t.Skill || t.Search) && b.calls[i].early == nil {
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
		b.p.conts.Release(b.cont)
	}
}

func (b *batch) resolveFrom(i int) { b.p.resolve.from(b, i) }

// runCalls runs one run (next is the index after it): calls that cannot run
// finish at once, the others are decided, then parked or executed. It
// reports false when calls parked and the batch must wait.
func (b *batch) runCalls(run []*callState, next int) bool {
	pc := permissionContext(b.p.sessions.Session(b.session))
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
			c.rule = spec.rule
			if q := b.p.quota; res == nil && spec.kind != "" && q != nil {
				res = q.admitPark(b, c) // counted when it parks (chain.go)
			}
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
		parks, specs = b.p.park.reuse(b, parks, specs)
	}
	if len(parks) > 0 && !b.p.park.park(b, parks, specs, next) {
		return false // a re-sent batch found the first one parked
	}
	if len(execs) == 1 {
		b.execute(execs[0])
	} else {
		// In parallel, each call once the one before it passed the
		// quotas: the calls of a run are counted in call order.
		var wg sync.WaitGroup
		for _, c := range execs {
			var admitted chan struct{}
			if b.p.quota != nil {
				admitted = make(chan struct{})
				c.admitted = admitted // taken by jobOf, in the call's goroutine
			}
			wg.Go(func() { b.execute(c) })
			if admitted != nil {
				<-admitted
			}
		}
		wg.Wait()
	}
	if len(parks) == 0 || b.cont == nil {
		// Nothing parked (past the session's limit, or the continuation
		// could not be written): every call of the run has its result,
		// and the batch goes on.
		return true
	}
	return b.settleRun(next)
}

// settleRun hands a run with parked calls over to the continuation
// (parkStep.settle); true when the batch goes on here.
func (b *batch) settleRun(next int) bool { return b.p.park.settle(b, next) }

// execute runs c through the executor chain and finishes it, unless a
// cancel finished it first.
func (b *batch) execute(c *callState) {
	j := jobOf(b, c)
	ctx, cancel := j.callContext(b.ctx)
	defer cancel()
	b.mu.Lock()
	if c.result != nil { // interrupted before it started
		b.mu.Unlock()
		j.admit()
		return
	}
	c.cancel = cancel
	b.mu.Unlock()
	b.settle(c, b.p.exec.Exec(ctx, j), false) // the chain's audit middleware recorded it
}

var unavailable = bus.NoWorkerResult

// finish ends c, a call that did not run through the executor chain, with
// res; false when the call already had a result.
func (b *batch) finish(c *callState, res bus.Result) bool { return b.settle(c, res, true) }

// settle sets c's result once, fitted, and publishes its
// io.toolbus.call.result; outside says the call did not run through the
// chain, whose audit middleware records the calls it runs.
func (b *batch) settle(c *callState, res bus.Result, outside bool) bool {
	res = b.p.fit.fit(b, c, res)
	b.mu.Lock()
	if c.result != nil {
		b.mu.Unlock()
		return false
	}
	c.settled = res
	c.result = &c.settled
	b.mu.Unlock()
	if outside {
		b.report(c, res)
	} else {
		b.p.report.result(b, c, res)
	}
	return true
}

// report records a call that ended outside the chain in the audit trail
// (when on), and publishes its io.toolbus.call.result when it gets one
// (reportStep).
func (b *batch) report(c *callState, res bus.Result) {
	if b.p.audit != nil {
		b.p.audit.record(b, c, res)
	}
	b.p.report.result(b, c, res)
}

// done publishes batch.done, waits until the events stream holds the
// batch's events, and removes the continuation of a batch that parked.
func (b *batch) done() {
	b.p.report.done(b)
	if b.cont != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 10*time.Second)
		defer cancel()
		if err := b.p.conts.Finish(ctx, b.cont); err != nil {
			b.p.log.Warn("router: continuation not removed", "session", b.session, "reply", b.replyID, "err", err)
		}
	}
}

// stored waits until the events stream holds every event the batch has
// published so far.
func (b *batch) stored() { b.p.report.stored(b) }

// take returns *s, emptied, under mu.
func take[T any](mu *sync.Mutex, s *[]T) []T {
	mu.Lock()
	defer mu.Unlock()
	v := *s
	*s = nil
	return v
}
