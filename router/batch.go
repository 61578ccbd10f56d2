package router

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/session"
	"github.com/toolbus/toolbus/skills"
)

// batch is one model turn in flight on this router, new or resumed, going
// through the pipeline's steps (docs/router.md "Where each step lives").
type batch struct {
	p *pipeline
	turn
	calls    []*callState
	one      [1]*callState // calls of a batch of one
	oneState [1]callState
	oneCall  [1]bus.Call // the calls of a new batch of one as decoded (decodeTurn)
	// ctx is the router's (pipeline.base): each call has its own
	// (callContext); one of the batch's would end nothing more.
	ctx   context.Context
	start time.Time // when the batch arrived; zero for a continuation

	cont   *parked.Batch // the continuation record once the batch parked
	parked []bus.Parked  // what this router parked (and queued) last
	// refused is the bad_request of a copy with other calls than its
	// batch's (docs/protocol.md 3.1): its answer, instead of a reply.
	refused error

	sent   []*sentEvent     // events published and not yet known to be stored
	sent1  [1]*sentEvent    // the first sent's array (publish): most batches send one event
	audits []*audit.Pending // audit records on their way to P_AUDIT (chain.go)
	// results is the unclosed {"results":[...] a read-only batch's
	// batch.done leaves for the reply to finish (nil: the reply encodes).
	results    []byte
	resultsBox *[]byte // the pool's pointer to results' buffer (resultsBuf)

	note noticeLink // among the router's notices while it awaits its reply (running.go)

	// tracked says runningBatches holds b (only b's goroutine sets it), so
	// a second untrack takes no lock.
	tracked bool

	mu         sync.Mutex     // guards callState.result/raw/cancel/parking, parking, sent and audits
	publishing sync.WaitGroup // result events set by interrupt, not yet published
	parking    chan struct{}  // closed once the park in flight returned (startParking); nil: none
	heard      cancelsHeard   // the cancels this router handled for the batch, for a next run to wait on
}

// callState is one call of a batch.
type callState struct {
	call      bus.Call
	target    groups.Resolved // what the call runs
	input     json.RawMessage // the validated input object
	early     *bus.Result     // the result when the call cannot run
	rule      string          // why the permission engine decided as it did (decide), for the audit record
	limitRule string          // the limit rule that refused the call (quotas.refuse)
	cached    bool            // the result cache answered the call (quotas.wrap), for the audit record
	result    *bus.Result     // set once, when the call finishes
	recorded  bool            // result is the call's P_parked record's (parkStep.reuse): its call.result has the call's id (parked.ResultID)
	landed    bool            // result is the chain's, and P_ledger held it when the chain returned (job.landed; writtenCall)
	settled   bus.Result      // what result points to when settle set it (no allocation of its own)
	raw       json.RawMessage // result encoded once, for the event, the reply and batch.done
	size      int64           // bytes its result takes in the batch's aggregate messages (outputs.go)
	cancel    stopper
	parking   bool          // it parks (startParking) or waits in its record (fromContinuation): its outcome is the record's, which a cancel ends (canceller.end)
	job       job           // what the executor chain runs (jobOf)
	ctx       callCtx       // the call's context when job.callContext makes one
	admitted  chan struct{} // for jobOf: closed once the call passed the quotas (runCalls)
}

// newBatch starts the batch of a turn on the pipeline.
func (p *pipeline) newBatch(t turn, start time.Time) *batch {
	return p.initBatch(new(batch), t, start)
}

// initBatch is newBatch in b, whose oneCall may hold the decoded calls.
func (p *pipeline) initBatch(b *batch, t turn, start time.Time) *batch {
	b.p, b.turn, b.start = p, t, start
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

// fromContinuation rebuilds a batch from its continuation and results.
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
		} else {
			c.parking = slices.Contains(cont.Waiting, c.call.ID) // a repair's last run: its record's
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

// Subject kinds of batches: an agent's on P.call.<session>, a bridge's
// question on P.ask.<session> (docs/protocol.md 12, 1.17).
const (
	kindCall = "call"
	kindAsk  = "ask"
)

// onBatch is the handler of the batches on subjects of kind: kindAsk's
// are bridges' questions, which only bridges may publish.
func (r *Router) onBatch(kind string) func(*nats.Msg, time.Time) {
	return func(m *nats.Msg, since time.Time) { r.takeBatch(m, kind, since) }
}

// takeBatch runs a batch that came on a subject of kind, read at since:
// its wait for a slot counts towards its first notice.
func (r *Router) takeBatch(m *nats.Msg, kind string, since time.Time) {
	var ev bus.Event // the batch's attributes: read here only, so on the stack
	b := new(batch)  // first: a batch of one call is decoded into it
	decoded, t, err := r.decodeTurn(m, kind, r.cfg.Limits, &ev, b.oneCall[:0])
	var e *bus.Event // what refusedRequest is told: nil when m was no event
	if decoded {
		e = &ev
	}
	if err == nil {
		err = checkAsked(t, kind == kindAsk)
	}
	if err == nil {
		t.data.User, err = identify(r.cfg.Identities, t.session, t.data.User)
	}
	if err != nil {
		r.guards.audit.refusedRequest(r.base, r.subj, m.Subject, kind, e, err)
		r.reject(m, err)
		return
	}
	r.pipe.initBatch(b, t, since)
	r.m.Batches.Inc()
	other := r.batches.track(b)
	defer r.batches.untrack(b)
	if err := r.pipe.park.sameAs(b, other); err != nil {
		// A copy with other calls under the reply id (3.1): refused, and
		// forgotten first, so a copy sent next does not meet it here.
		r.batches.untrack(b)
		r.guards.audit.refusedRequest(r.base, r.subj, m.Subject, kind, e, err)
		r.reject(m, err)
		return
	}
	r.notices.add(b, m.Reply) // running notices until the batch's answer (docs/protocol.md 3.2.1)
	defer r.notices.drop(b)
	complete := b.run(0)
	// A cancel from now on is the continuation's (cancelParked): tracked
	// until the reply, the batch would interrupt its calls a second time.
	r.batches.untrack(b)
	if b.refused != nil { // a copy with other calls than its batch (docs/protocol.md 3.1)
		r.notices.drop(b)
		r.guards.audit.refusedRequest(r.base, r.subj, m.Subject, kind, e, b.refused)
		r.reject(m, b.refused)
		return
	}
	// call.parked and batch.done are stored before the reply; a batch cut
	// off gets none (the agent re-sends, and the ledger answers).
	if b.finishRest(complete) && m.Reply != "" {
		r.notices.drop(b) // no notice after the reply
		b.p.report.reply(b, m.Reply)
	}
}

// decodeTurn reads and checks batch message m, which came on a subject of
// kind, into e (decoded: e holds the event, whatever the error), its calls
// into calls when they fit. Its data is read in the same pass
// (bus.DecodeBatch) and checked; a batch refused so is decoded again in
// full, so its error is the one it always got.
func (w *wire) decodeTurn(m *nats.Msg, kind string, lim Limits, e *bus.Event, calls []bus.Call) (decoded bool, t turn, err error) {
	var data bus.Batch
	read, err := bus.DecodeBatch(m, e, &data, calls)
	if err == nil {
		if _, err = w.checked(m, e, kind, bus.TypeCallBatch); err == nil {
			if t, err = checkTurn(e, lim, calls, read); err == nil {
				return true, t, nil
			}
		}
	}
	full, err := w.decode(m, kind, bus.TypeCallBatch)
	if err != nil {
		return false, turn{}, err
	}
	*e = *full
	t, err = checkTurn(e, lim, calls, nil)
	return true, t, err
}

// run executes the batch from call index start, run after run (nextRun),
// a safe run's calls in parallel; a run that parks calls holds back the
// rest. It reports whether every call has its result.
func (b *batch) run(start int) bool {
	// The session is read from KV once per run, unless a new batch's
	// sessionrev lets the cache serve (docs/protocol.md 4.2).
	var rev uint64
	if start == 0 && !b.start.IsZero() {
		rev = b.data.SessionRev
	}
	sess := b.p.sessions.Snapshot(b.ctx, b.session, rev)
	if start == 0 && !b.start.IsZero() { // a new batch: its session is in use
		if err := b.p.sessions.TouchRead(b.ctx, b.session, sess, b.start); err != nil {
			b.p.log.Warn("router: session not touched", "session", b.session, "err", err)
		}
	}
	b.p.resolve.from(b, sess, start)
	for i := start; i < len(b.calls); {
		if b.cutOff() {
			return false
		}
		j := nextRun(i, len(b.calls), safeAt(b))
		if !b.runCalls(b.calls[i:j], j, sess) {
			return false // parked: the continuation takes it from here
		}
		if j < len(b.calls) {
			awaitCancels(b, b.calls[i:j])
		}
		if t := b.calls[i].target; (t.Reset || t.Skill || t.Search) && b.calls[i].early == nil {
			sess = b.p.sessions.Session(b.session) // as the call left it
			b.p.resolve.from(b, sess, j)
		}
		i = j
	}
	return true
}

// cancelWait bounds how long a batch's next run waits for a cancel that a
// worker's interrupted result names (protocol 3.5, 1.30): a worker that
// names a cancel nobody sent delays its own batch by that much, no more.
const cancelWait = 2 * time.Second

// maxCancelsHeard bounds the cancel ids a batch keeps (cancelsHeard): an
// agent may send any number of cancels for its batch.
const maxCancelsHeard = 16

// awaitCancels waits, before b's next run, until this router has handled
// each cancel that a worker's interrupted result of run names
// (job.cancelledBy), or cancelWait passed: the worker may hear a cancel
// first (3.5), and the next run must find the calls the cancel names
// ended (docs/router.md). The worker's word ends nothing itself.
func awaitCancels(b *batch, run []*callState) {
	var timer *time.Timer
	for _, c := range run {
		id := c.job.cancelledBy
		if id == "" {
			continue
		}
		if timer == nil {
			timer = time.NewTimer(cancelWait)
			defer timer.Stop()
		}
		if !b.heard.wait(b.ctx, id, timer.C) {
			b.p.log.Warn("router: a worker named a cancel this router did not handle in time", "session", b.session, "reply", b.replyID, "cancel", id)
			return
		}
	}
}

// cancelsHeard are the ids of the last cancels this router handled for a
// batch (canceller.heard), at most maxCancelsHeard: an agent may send any
// number of cancels for its batch.
type cancelsHeard struct {
	mu      sync.Mutex
	ids     []string
	hearing chan struct{} // closed when ids grows; nil: nobody waits
}

// hear notes cancel id, handled: the batch's calls it names are ended.
func (h *cancelsHeard) hear(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ids) == maxCancelsHeard {
		h.ids = slices.Delete(h.ids, 0, 1)
	}
	h.ids = append(h.ids, id)
	if h.hearing != nil {
		close(h.hearing)
		h.hearing = nil
	}
}

// wait reports whether cancel id was heard before until or ctx ended.
func (h *cancelsHeard) wait(ctx context.Context, id string, until <-chan time.Time) bool {
	for {
		h.mu.Lock()
		if slices.Contains(h.ids, id) {
			h.mu.Unlock()
			return true
		}
		if h.hearing == nil {
			h.hearing = make(chan struct{})
		}
		ch := h.hearing
		h.mu.Unlock()
		select {
		case <-ch:
		case <-until:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// cutOff reports whether the drain deadline cut the batch off.
func (b *batch) cutOff() bool { return context.Cause(b.ctx) == errDrainDeadline }

// release lets go of a cut-off batch's lease, for another router.
func (b *batch) release() {
	if b.cont != nil {
		b.p.conts.Release(b.cont)
	}
}

func (b *batch) resolveFrom(i int) { b.p.resolve.from(b, b.p.sessions.Session(b.session), i) }

// runCalls runs one run (next is the index after it) in sess, b's session:
// each call finished, parked or executed; false when calls parked and the
// batch must wait.
func (b *batch) runCalls(run []*callState, next int, sess *groups.Session) bool {
	pc := permissionContext(sess)
	var execs, parks []*callState
	var specs []parkSpec
	for _, c := range run {
		b.mu.Lock()
		finished := c.result != nil
		b.mu.Unlock()
		switch {
		case finished:
		case b.cont != nil && b.cont.IsCancelled(c.call.ID):
			b.cancelled(c)
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
		if parks, specs = b.p.park.reuse(b, parks, specs); b.refused != nil {
			return false // a copy with other calls than its batch (3.1): nothing more runs
		}
		parks, specs = startParking(b, parks, specs)
	}
	if len(parks) > 0 && !endParking(b, b.p.park.park(b, parks, specs, next)) {
		if b.cont != nil || b.refused != nil {
			// Taken over by another router, or this copy is refused.
			return false
		}
		// A re-sent batch found the first one parked; its reply holds every
		// call of this run (3.2): the others run here through the ledger
		// (3.1), unless the first copy has their results or parked them.
		b.executeAll(slices.DeleteFunc(execs, func(c *callState) bool {
			return slices.ContainsFunc(b.parked, func(p bus.Parked) bool { return p.ID == c.call.ID })
		}))
		return false
	}
	b.executeAll(execs)
	if len(parks) == 0 || b.cont == nil {
		// Nothing parked (past the session's limit, or not written): every
		// call of the run has its result.
		return true
	}
	return b.p.park.settle(b, next) // true when the batch goes on here
}

// startParking marks calls as parking, under the lock interrupt takes: a
// cancel that comes from now on leaves them to their records, which it ends
// once the park returned (canceller.end), and one that came since runCalls
// looked left them ended and out (their records are forestall's). So a
// call the cancel names never stays parked, whichever comes first, and it
// is reported interrupted only by the write that ends its record (3.5).
func startParking(b *batch, calls []*callState, specs []parkSpec) ([]*callState, []parkSpec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].result != nil {
			calls, specs = slices.Delete(calls, i, i+1), slices.Delete(specs, i, i+1)
		}
	}
	for _, c := range calls {
		c.parking = true
	}
	if len(calls) > 0 {
		b.parking = make(chan struct{})
	}
	return calls, specs
}

// endParking ends the park in flight (startParking), whose outcome was
// parked: the queued calls a cancel ended meanwhile are no longer listed,
// as their results say; it lets the cancel go on. A call that parked
// stays parking: its record's.
func endParking(b *batch, parked bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.parking)
	b.parking = nil
	ended := func(p bus.Parked) bool {
		return slices.ContainsFunc(b.calls, func(c *callState) bool { return c.call.ID == p.ID && c.result != nil })
	}
	if slices.ContainsFunc(b.parked, ended) { // a new list: the notices read it (running.go)
		b.parked = slices.DeleteFunc(slices.Clone(b.parked), ended)
	}
	return parked
}

// executeAll executes the calls of a run in parallel, each once the one
// before it passed the quotas (counted in call order).
func (b *batch) executeAll(execs []*callState) {
	if len(execs) == 1 {
		b.execute(execs[0])
		return
	}
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

// execute runs c through the executor chain, unless a cancel finished it.
func (b *batch) execute(c *callState) {
	j := jobOf(b, c)
	ctx, cancel := j.callContext(b.ctx)
	defer cancel.stop()
	b.mu.Lock()
	if c.result != nil { // interrupted before it started
		b.mu.Unlock()
		j.admit()
		return
	}
	c.cancel = cancel
	b.mu.Unlock()
	b.settle(c, b.p.exec.Exec(ctx, j), chained) // the chain's audit middleware recorded it
}

var unavailable = bus.NoWorkerResult

// forestallBudget bounds the ledger writes of one cancel's calls (forestall).
const forestallBudget = 5 * time.Second

// cancelled ends c, which a cancel named before it started (docs/protocol.md
// 3.5), interrupted, recorded first where a re-sent copy would look (forestall).
func (b *batch) cancelled(c *callState) {
	if c.forestalled() {
		forestall(b, []*callState{c})
	}
	b.finish(c, interrupted(c.call))
}

// forestalled reports whether a re-sent copy of the batch could run, park
// or write c, so that a cancel records c's end first (forestall). The
// caller holds b.mu or runs the batch.
func (c *callState) forestalled() bool { return c.ledgered() || c.mayPark() || c.writesSession() }

// writesSession reports whether c is a built-in that may write the session
// (reset_tools, search_tools, the skill loader): a cancel marks it there
// (session.Store.Forestall), and its writes are refused from then on.
func (c *callState) writesSession() bool {
	t := &c.target
	return c.early == nil && (t.Reset || t.Search || t.Skill)
}

// ledgered reports whether a re-sent copy of the batch would run c through
// the ledger (docs/protocol.md 3.1): a worker's tool that is not read-only,
// or not resolved yet. The caller holds b.mu or runs the batch.
func (c *callState) ledgered() bool {
	t := &c.target
	switch {
	case c.early != nil, t.Reset, t.Search, t.Read, t.Skill, t.External != nil, t.Code != "":
		return false
	}
	return t.Tool == nil || !t.Tool.Def.ReadOnly && !t.Tool.Def.External
}

// mayPark reports whether a re-sent copy of the batch might park c
// (docs/protocol.md 6.1): any tool but a built-in, of a call that can run.
// The caller holds b.mu or runs the batch.
func (c *callState) mayPark() bool {
	t := &c.target
	return c.early == nil && !t.Reset && !t.Search && !t.Read && !t.Skill && t.Code == ""
}

// forestall records the interrupted result of calls a cancel ended before
// they started, in the ledger (ledgered) and in P_parked (mayPark), so a
// re-sent copy neither runs nor parks them (docs/protocol.md 3.5, 1.12),
// and marks the built-ins among them that write the session in it
// (writesSession, 1.32), so neither a copy's write nor a running one's
// lands. The writes share forestallBudget; one that fails leaves a re-send
// free to run the call. (batch keeps to 15 methods.)
func forestall(b *batch, calls []*callState) {
	if len(calls) == 0 {
		return
	}
	lctx, lcancel := b.p.report.landing.start(b.ctx)
	defer lcancel()
	ctx, cancel := context.WithTimeout(lctx, forestallBudget)
	defer cancel()
	var builtins []string // marked in the session, all in one write
	for _, c := range calls {
		if c.writesSession() {
			builtins = append(builtins, c.call.ID)
			continue
		}
		if b.p.ledger != nil && c.ledgered() {
			if err := b.p.ledger.Interrupt(ctx, bus.CallKey(b.session, b.replyID, c.call.ID), interrupted(c.call)); err != nil {
				b.p.log.Warn("router: a cancelled call's result not recorded in the ledger; a re-send may run it", "session", b.session, "reply", b.replyID, "call", c.call.ID, "err", err)
			}
		}
		// A copy that would park the call reads its P_parked record, not
		// the ledger (parkStep.reuse): it gets interrupted there (3.5, 1.12).
		if c.mayPark() {
			in := c.input
			if in == nil {
				in = c.call.Input
			}
			call := bus.Call{ID: c.call.ID, Name: c.call.Name, Input: in}
			if err := b.p.conts.Forestall(ctx, b.session, b.replyID, call, interrupted(c.call)); err != nil {
				b.p.log.Warn("router: a cancelled call's result not recorded in P_parked; a re-send may park it", "session", b.session, "reply", b.replyID, "call", c.call.ID, "err", err)
			}
		}
	}
	if len(builtins) > 0 {
		if err := b.p.sessions.Forestall(ctx, b.session, b.replyID, builtins); err != nil {
			b.p.log.Warn("router: cancelled built-in calls not recorded in the session; a re-send may run them", "session", b.session, "reply", b.replyID, "calls", builtins, "err", err)
		}
	}
}

// finish ends c outside the executor chain with res; false if it had one.
func (b *batch) finish(c *callState, res bus.Result) bool { return b.settle(c, res, outside) }

// settledBy says where a call's result comes from.
type settledBy uint8

const (
	chained  settledBy = iota // the executor chain, whose audit middleware records the calls it runs
	outside                   // not the chain: settle records it in the audit trail
	fromPark                  // outside, and the call's P_parked record's (parkStep.reuse): its event has the record's id
)

// settle sets c's result once, fitted, and publishes it; false if c had one.
func (b *batch) settle(c *callState, res bus.Result, by settledBy) bool {
	res = b.p.fit.fit(b, c, res)
	b.mu.Lock()
	if c.result != nil {
		b.mu.Unlock()
		return false
	}
	c.recorded = by == fromPark
	c.landed = by == chained && c.job.landed // the chain's own result: not a cancel's that came first
	c.settled = res
	c.result = &c.settled
	b.mu.Unlock()
	if by == chained {
		b.p.report.result(b, c, res)
	} else {
		b.report(c, res)
	}
	return true
}

// report audits a call ended outside the chain and publishes its result.
func (b *batch) report(c *callState, res bus.Result) {
	if b.p.audit != nil {
		b.p.audit.record(b, c, res)
	}
	b.p.report.result(b, c, res)
}

// done publishes batch.done, awaits the stream and removes the continuation.
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

// take returns *s, emptied, under mu.
func take[T any](mu *sync.Mutex, s *[]T) []T {
	mu.Lock()
	defer mu.Unlock()
	v := *s
	*s = nil
	return v
}

// The ports of the batch pipeline: what a step needs from outside the
// batch, as small interfaces with fakes (ports_test.go); newPipeline wires
// them from a running Router (docs/router.md).

// sessionPort is the session as the steps of a batch see it.
type sessionPort interface {
	Snapshot(ctx context.Context, id string, rev uint64) *groups.Session // session.Revisions
	Session(id string) *groups.Session
	Revision(id string) uint64
	TouchRead(ctx context.Context, id string, sess *groups.Session, now time.Time) error
	Reset(ctx context.Context, id string, input json.RawMessage) (string, error) // reset_tools
	Forestall(ctx context.Context, id, replyID string, calls []string) error     // a cancel's built-ins (session.Store)
}

// continuationPort is the record of parked calls and batches (parked.Store).
type continuationPort interface {
	Park(ctx context.Context, run parked.Run) (parked.Parking, error)
	Settle(ctx context.Context, session, replyID string, results map[string]bus.Result) (*parked.Batch, bool, error)
	Finish(ctx context.Context, b *parked.Batch) error
	Release(b *parked.Batch)
	Marks(b *parked.Batch)
	Get(ctx context.Context, key string) (*parked.Record, error)
	Parked(session, replyID string) []*parked.Record
	Held(session, replyID string, calls []bus.Call) *parked.Record
	Continuation(ctx context.Context, rec *parked.Record) (*parked.Batch, error)
	Forestall(ctx context.Context, session, replyID string, c bus.Call, res bus.Result) error
}

// parkedStore is the parked machine's verbs and reads in one value.
type parkedStore struct {
	*parked.Store
	parked.Reads
	parked.Mends
	parked.Cancels
}

func parkedPort(s *parked.Store) parkedStore { return parkedStore{s, s.Read, s.Mends, s.Cancels} }

// runnerPort runs what a call resolved to.
type runnerPort interface {
	runTool(ctx context.Context, j *job) bus.Result
	search(ctx context.Context, b *batch, c *callState) bus.Result
	loadSkill(ctx context.Context, session string, user json.RawMessage, c bus.Call, input json.RawMessage) bus.Result
	readOutput(ctx context.Context, session string, c bus.Call, input json.RawMessage) bus.Result
}

// eventPort publishes a session's events and sends replies.
type eventPort interface {
	// publish sends an event to the events stream under id ("": a new
	// one) at once; stored waits for the stream to hold it.
	publish(id, typ, session, replyID, callID string, trace [2]string, data any) (*sentEvent, error)
	stored(ctx context.Context, evs []*sentEvent) error
	// announce sends an event without asking for an acknowledgement.
	announce(typ, session, replyID, callID string, trace [2]string, data json.RawMessage) error
	// live sends an event for live subscribers only (call.parked).
	live(typ, session, replyID, callID string, trace [2]string, data any) error
	// reply sends an event to a reply subject (core NATS).
	reply(subject, typ, session, replyID string, trace [2]string, data json.RawMessage) error
}

// pipeline is the batch pipeline with its ports wired (never the Router).
type pipeline struct {
	sessions sessionPort
	conts    continuationPort
	resolve  resolveStep
	exec     Executor // the executor chain: the guardrails that are on around execStep (chain.go)
	park     parkStep
	report   reportStep
	fit      fitStep
	ledger   *ledger.Ledger // records the results of calls cancelled before they started; nil: none
	quota    *quotas        // counts calls that park; nil when off (chain.go)
	audit    *auditTrail    // records calls that end outside the chain; nil when off (chain.go)
	log      *slog.Logger
	base     context.Context // the parent of every batch's context (the Router's)
	calls    *callCtx        // the root of the calls' contexts under base (callctx.go); nil: the context package's
}

// newPipeline wires the batch pipeline from a started Router.
func (r *Router) newPipeline() *pipeline {
	sessions := routerSessions{r.sessions, r.groups}
	resolve := func(sess *groups.Session, req *groups.Request, user json.RawMessage, name string) groups.Resolved {
		if t, ok := resolveRead(r.cfg.Guard.ReadOutput, req, name); ok {
			return t
		}
		return r.skills.resolveName(r.groups.View(r.reg, sess, req), req, user, name)
	}
	return &pipeline{
		sessions: sessions,
		conts:    parkedPort(r.parked),
		resolve:  resolveStep{resolve: resolve, refresh: r.reg.Refresh, health: r.store.Health, log: r.log},
		exec:     chain(execStep{runner: routerRunner{r}, sessions: sessions}, r.guards.middlewares()...),
		park:     parkStep{landing: r.life.Landing, conts: parkedPort(r.parked), subj: r.subj, maxParked: r.cfg.Limits.MaxParked, parked: r.m.Parked},
		report:   reportStep{landing: r.life.Landing, audit: r.guards.audit, events: r.events, sessions: sessions, m: r.m, log: r.log, maxPayload: r.nc.MaxPayload},
		fit:      fitStep{outputs: r.outputs, maxPayload: r.nc.MaxPayload, taken: r.parked.Read.Taken},
		ledger:   r.led,
		quota:    r.guards.quota,
		audit:    r.guards.audit,
		log:      r.log,
		base:     r.base,
		calls:    newCallContexts(r.base),
	}
}

// routerSessions is the sessionPort over session.Revisions and groups.Store.
type routerSessions struct {
	*session.Revisions
	*groups.Store
}

// routerRunner is the runnerPort over the Router's executors.
type routerRunner struct{ r *Router }

func (x routerRunner) runTool(ctx context.Context, j *job) bus.Result {
	if x.r.bg != nil && mayBackground(j) {
		return x.r.bg.run(ctx, j) // a background task (background.go)
	}
	return x.r.tools.runTool(ctx, j)
}

// search runs search_tools over what the session and user could reach.
func (x routerRunner) search(ctx context.Context, b *batch, c *callState) bus.Result {
	r := x.r
	sess := r.groups.Session(b.session)
	var docs []groups.SkillDoc
	if loaderShown(b.req) && r.skills != nil {
		gs := r.groups.Groups()
		for _, s := range r.skills.cat.Skills(userOf(b.data.User)) {
			docs = append(docs, groups.SkillDoc{Name: s.Name, Description: s.Description, Groups: skills.GroupsOf(s.Name, gs)})
		}
	}
	text, err := r.groups.View(r.reg, sess, b.req).Search(ctx, b.session, c.input, docs)
	return builtinResult(c.call, text, err)
}

func (x routerRunner) loadSkill(ctx context.Context, session string, user json.RawMessage, c bus.Call, input json.RawMessage) bus.Result {
	return x.r.skills.loadSkill(ctx, session, user, c, input)
}
func (x routerRunner) readOutput(ctx context.Context, session string, c bus.Call, input json.RawMessage) bus.Result {
	ctx, cancel := context.WithTimeout(ctx, outputsBudget)
	defer cancel()
	return readOutput(ctx, x.r.stored, session, c, input)
}

// canceller takes cancels on P.cancel.<session> (protocol 3.5), on every router.
type canceller struct {
	*wire
	running    func(session, replyID string) []*batch // every copy of the batch running here
	confirming *confirmed
	parked     func(ctx context.Context, session, replyID string, ids []string) // records the cancel of the batch's parked and queued calls
	knows      func(session, replyID string) bool                               // whether this router knows the batch parked
	ends       *cancelEnds                                                      // the cancels still to record, by batch
	work       func(func(context.Context)) bool                                 // runs a batch's writer of cancels as tracked work; false once draining
}

// onCancel ends the named calls of a batch running on this router (the
// worker cancels its own from the same event); a malformed cancel gets
// io.toolbus.error from every router.
func (r *canceller) onCancel(m *nats.Msg) {
	e, err := r.decode(m, "cancel", bus.TypeCallCancel)
	if err == nil && e.ReplyID == "" {
		err = bus.Errorf(bus.CodeBadEvent, "a cancel needs the replyid of the batch")
	}
	var c bus.Cancel
	if err == nil && len(e.Data) > 0 && string(e.Data) != "null" {
		if uerr := json.Unmarshal(e.Data, &c); uerr != nil {
			err = bus.Errorf(bus.CodeBadEvent, "cancel data must be {\"calls\": [call ids]}: %v", uerr)
		} else if len(c.Calls) > bus.MaxCancelCalls {
			err = bus.Errorf(bus.CodeBadEvent, "a cancel names %d calls; at most %d are allowed", len(c.Calls), bus.MaxCancelCalls)
		}
	}
	if err != nil {
		r.reject(m, err)
		return
	}
	if c.Task != "" {
		// A task's cancel (background.stopRun) is for the worker, not a
		// re-sent copy of its batch running here (3.5, 1.12); its run's
		// result is the task's, no batch's next run waits for it.
		return
	}
	parking := r.interruptHere(e.SessionID, e.ReplyID, c.Calls) // each copy of a re-sent batch (3.1, 3.5)
	r.heard(e)
	r.confirming.cancel(e.SessionID, e.ReplyID, c.Calls)
	r.end(e.SessionID, e.ReplyID, c.Calls, parking)
}

// heard tells the copies of cancel e's batch running here that it was
// handled (awaitCancels).
func (r *canceller) heard(e *bus.Event) {
	if e.ID == "" {
		return
	}
	for _, b := range r.running(e.SessionID, e.ReplyID) {
		b.heard.hear(e.ID)
	}
}

// end records the cancel in P_parked (cancelParked), once the parks in
// flight that interruptHere found have returned, so that their records are
// there to end: only that write reports a parked call interrupted. One
// writer a batch (cancelEnds), as tracked work, not the handler's dispatch
// slot: a park's writes may retry through a leader election for minutes
// (redteam40b), and the cancel's own retry through the store's outage until
// the records expire or the router stops. After each write it looks again,
// for a continuation resumed since the first look that read its marks
// before these were written (parked.Reads.Marks); interrupt ends a call
// once however often it is reached.
func (r *canceller) end(session, replyID string, ids []string, parking []<-chan struct{}) {
	ref := batchRef{session, replyID}
	if len(parking) == 0 && !r.knows(session, replyID) || !r.ends.add(ref, ids, parking) {
		return // nothing of the batch parked here, or its writer takes these
	}
	write := func(ctx context.Context) {
		for {
			ids, parking, ok := r.ends.take(ref)
			if !ok {
				return
			}
			for _, ch := range parking {
				<-ch
			}
			r.parked(ctx, session, replyID, ids)
			if p := r.interruptHere(session, replyID, ids); len(p) > 0 {
				r.ends.add(ref, ids, p)
			}
		}
	}
	if !r.work(write) {
		ctx, cancel := r.landing()
		defer cancel()
		write(ctx)
	}
}

// interruptHere interrupts the copies of a batch running here and returns
// what closes when the parks in flight of the calls it ended
// (startParking) have returned.
func (r *canceller) interruptHere(session, replyID string, ids []string) (parking []<-chan struct{}) {
	for _, b := range r.running(session, replyID) {
		if ch := b.interrupt(ids); ch != nil {
			parking = append(parking, ch)
		}
	}
	return parking
}

// confirmed holds the cancels of the confirmed calls running here, outside batches.
type confirmed struct {
	calls sync.Map // call key → context.CancelFunc
}

// add records a running confirmed call; the function returned forgets it.
func (x *confirmed) add(session, replyID, callID string, cancel context.CancelFunc) func() {
	key := bus.CallKey(session, replyID, callID)
	x.calls.Store(key, cancel)
	return func() { cancel(); x.calls.Delete(key) }
}

// cancel cancels a batch's running confirmed calls named by ids (all when empty).
func (x *confirmed) cancel(session, replyID string, ids []string) {
	batch := parked.BatchKey(session, replyID) + "." // ids have no dots: the prefix is the batch's calls
	for key, cancel := range x.calls.Range {
		if id, ok := strings.CutPrefix(key.(string), batch); ok && (len(ids) == 0 || slices.Contains(ids, id)) {
			cancel.(context.CancelFunc)()
		}
	}
}

// interrupt ends the calls named by ids (all when empty) that have no
// result, under the lock that execute and runCalls check, so an unstarted
// one never starts; done waits for their events (b.publishing). The
// unstarted calls are recorded interrupted (forestall) before a running one
// is stopped: its end (in the ledger) releases the copies of the batch that
// wait for it, here or on another router, before the cancel reaches them,
// and their next run must find its calls ended (3.1, 3.5). A call that
// parks or waits in its record is left to the cancel's end of that record
// (canceller.end), which alone reports it interrupted: interrupt returns
// what closes once a park in flight has written it (nil: none).
func (b *batch) interrupt(ids []string) (parking <-chan struct{}) {
	var hit, unstarted []*callState
	var running []stopper
	b.mu.Lock()
	for _, c := range b.calls {
		if c.result == nil && (len(ids) == 0 || slices.Contains(ids, c.call.ID)) {
			if c.parking {
				parking = b.parking // nil once written
				continue
			}
			switch {
			case c.cancel != nil:
				running = append(running, c.cancel)
				if c.writesSession() {
					unstarted = append(unstarted, c) // its write, if it has not landed, must not (1.32)
				}
			case c.forestalled():
				unstarted = append(unstarted, c) // a re-sent copy must not run, park nor write it either (3.5)
			}
			c.result = new(interrupted(c.call))
			hit = append(hit, c)
		}
	}
	b.publishing.Add(len(hit))
	b.mu.Unlock()
	forestall(b, unstarted) // before the stops and the results: batch.done and the reply wait for them
	for _, s := range running {
		s.stop()
	}
	for _, c := range hit {
		b.report(c, interrupted(c.call)) // not *c.result, read unlocked: a park may set it (adopt)
		b.publishing.Done()
	}
	return parking
}

// runningBatches are the batches running on this router, by session and
// reply id, for cancels (docs/protocol.md 3.5) and drains; a reply id may
// have several copies here at once (3.1), and a cancel reaches each.
type runningBatches struct {
	mu   sync.Mutex
	m    map[batchRef]*batch   // one copy of each batch: no allocation of its own
	more map[batchRef][]*batch // the other copies, rare
}

// batchRef names a batch: a map key of two strings, no join, no allocation.
type batchRef struct{ session, replyID string }

// track makes a batch reachable by cancels, and returns another copy
// running here (parkStep.sameAs) or nil; untrack forgets it. Only b's own
// goroutine calls them (b.tracked).
func (rb *runningBatches) track(b *batch) *batch {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	b.tracked = true
	if rb.m == nil {
		rb.m, rb.more = map[batchRef]*batch{}, map[batchRef][]*batch{}
	}
	k := batchRef{b.session, b.replyID}
	switch cur, ok := rb.m[k]; {
	case !ok:
		rb.m[k] = b
		return nil
	case cur != b && !slices.Contains(rb.more[k], b):
		rb.more[k] = append(rb.more[k], b)
		return cur
	default:
		return nil
	}
}

func (rb *runningBatches) untrack(b *batch) {
	if !b.tracked {
		return
	}
	rb.mu.Lock()
	defer rb.mu.Unlock()
	b.tracked = false
	k := batchRef{b.session, b.replyID}
	cur, ok := rb.m[k]
	if !ok {
		return
	}
	var more []*batch
	if len(rb.more) > 0 { // the other copies are rare: no lookup without any
		more = rb.more[k]
	}
	if cur == b {
		if len(more) == 0 {
			delete(rb.m, k)
			return
		}
		rb.m[k], more = more[0], more[1:]
	} else {
		more = slices.DeleteFunc(more, func(x *batch) bool { return x == b })
	}
	if len(more) == 0 {
		delete(rb.more, k)
	} else {
		rb.more[k] = more
	}
}

// running returns the copies of a batch running here (none: nil).
func (rb *runningBatches) running(session, replyID string) []*batch {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	k := batchRef{session, replyID}
	b, ok := rb.m[k]
	if !ok {
		return nil
	}
	return append([]*batch{b}, rb.more[k]...)
}

// callsInFlight counts the calls started here and not finished.
func (rb *runningBatches) callsInFlight() int {
	rb.mu.Lock()
	bs := slices.Concat(slices.Collect(maps.Values(rb.m)), slices.Concat(slices.Collect(maps.Values(rb.more))...))
	rb.mu.Unlock()
	n := 0
	for _, b := range bs {
		b.mu.Lock()
		for _, c := range b.calls {
			if c.result == nil && c.cancel != nil {
				n++
			}
		}
		b.mu.Unlock()
	}
	return n
}
