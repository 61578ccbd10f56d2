package router

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/store"
)

// parkStep parks a run's waiting calls and records the continuation (6.1).
type parkStep struct {
	conts     continuationPort
	subj      bus.Subjects
	maxParked int // calls one session may have parked at once
	parked    *prometheus.CounterVec
	landing   landingFunc // the router's tracked writes (nil: untracked)
}

// park records b's continuation and parks the calls; false: an earlier copy parked.
func (s parkStep) park(b *batch, calls []*callState, specs []parkSpec, next int) bool {
	// Not counted: the batch's own parked calls, a re-sent copy's to adopt (3.1).
	if n := len(s.conts.Parked(b.session, "")) - len(s.conts.Parked(b.session, b.replyID)); n+len(calls) > s.maxParked {
		// Past the session's limit these calls end here, and the batch goes on.
		for _, c := range calls {
			b.finish(c, bus.ErrorResult(c.call, bus.CodeLimitExceeded, fmt.Sprintf(
				"LimitExceededError: The session has %d calls waiting for an answer; at most %d may wait at once. Answer or cancel some first.", n, s.maxParked)))
		}
		return true
	}
	ctx, cancel := s.landing.start(b.ctx)
	defer cancel()
	first := b.cont == nil
	if first {
		b.cont = &parked.Batch{Session: b.session, ReplyID: b.replyID, TraceParent: b.trace[0], TraceState: b.trace[1],
			Expiry: b.expiry, Data: b.data}
	}
	recs := make([]*parked.Record, len(calls))
	for i, c := range calls {
		recs[i] = &parked.Record{Session: b.session, ReplyID: b.replyID, Call: bus.Call{ID: c.call.ID, Name: c.call.Name, Input: c.input},
			Kind: specs[i].kind, User: b.data.User, Context: b.data.Context, SuggestedRules: specs[i].suggested,
			Reason: specs[i].reason, RequestScoped: specs[i].requestScoped}
	}
	run := parked.Run{Batch: b.cont, Calls: recs, Results: resultsOf(b), Next: next, Alone: alone(b, calls, next)}
	if first { // once per batch (docs/protocol.md 3.4), not again when a resumed batch parks more
		run.Announce = func(recs []*parked.Record) {
			setParked(b, s.listed(b, recs, next))
			// For live subscribers only (protocol 3.4): the reply lists them too.
			if err := b.p.report.events.live(bus.TypeCallParked, b.session, b.replyID, "", b.trace, bus.ParkedEvent{Calls: b.p.report.parkedFit(b.parked, 0)}); err != nil {
				b.p.log.Warn("router: call.parked not published", "session", b.session, "reply", b.replyID, "err", err)
			}
		}
	}
	got, err := s.conts.Park(ctx, run)
	if errors.Is(err, parked.ErrNotOwner) {
		// Taken over by another router, which parks these calls (6.1): this copy stops.
		b.p.log.Warn("router: continuation taken over by another router; this copy stops", "session", b.session, "reply", b.replyID, "err", err)
		return false
	}
	if err != nil {
		if first {
			b.cont = nil // nothing was recorded: there is no continuation to settle
		}
		for _, c := range calls {
			b.finish(c, unparked(c.call, err))
		}
		return true
	}
	if got.Before {
		b.cont = nil
		if got.Differs != nil {
			// A copy with other calls under the reply id: refused whole (3.1).
			b.refused = got.Differs
			return false
		}
		s.adopt(ctx, b, calls, specs, got)
		return false
	}
	b.cont = got.Batch
	for i, c := range calls {
		if err := got.Failed[c.call.ID]; err != nil {
			b.finish(c, unparked(c.call, err))
		} else if s.parked != nil {
			s.parked.WithLabelValues(recs[i].Kind).Inc()
		}
	}
	setParked(b, s.listed(b, got.Parked, next))
	return true
}

// unparked is the result of call c that could not park (err): limit_exceeded
// when its record or its batch's continuation is too large (protocol 6.1, 1.19),
// or P_parked is at its soft bound (1.24).
func unparked(c bus.Call, err error) bus.Result {
	if errors.Is(err, parked.ErrTooLarge) {
		return bus.ErrorResult(c, bus.CodeLimitExceeded, fmt.Sprintf(
			"LimitExceededError: Call %s could not wait for an answer: %v. Send it again with a smaller input, or in a batch of its own.", c.ID, err))
	}
	if errors.Is(err, store.ErrNoRoom) {
		return bus.ErrorResult(c, bus.CodeLimitExceeded, fmt.Sprintf(
			"LimitExceededError: Call %s could not wait for an answer: the store of waiting calls %v. Answer or cancel calls that wait, or send it again later.", c.ID, store.ErrNoRoom))
	}
	return internal(c, err)
}

// listed is what the reply and call.parked list: parked, then held-back calls.
func (s parkStep) listed(b *batch, recs []*parked.Record, next int) []bus.Parked {
	out := make([]bus.Parked, 0, len(recs)+len(b.calls)-next)
	for _, rec := range recs {
		out = append(out, parkedOf(rec))
	}
	for _, c := range b.calls[next:] {
		out = append(out, s.queued(c))
	}
	return out
}

// alone reports whether every call of the run but those that park has its result.
func alone(b *batch, calls []*callState, next int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.calls[:next] {
		if c.result == nil && !slices.Contains(calls, c) {
			return false
		}
	}
	return true
}

// parkedOf is a parked record as the reply and call.parked list it; asked:
// its batch came on P.ask.<session> (a bridge's question, 1.17), which its
// reply id says (1.18) for a continuation, a copy or another router's park too.
func parkedOf(rec *parked.Record) bus.Parked {
	return bus.Parked{ID: rec.Call.ID, Name: rec.Call.Name, Input: rec.Call.Input, Kind: rec.Kind,
		Subject: rec.Subject, SuggestedRules: rec.SuggestedRules, Asked: bus.AskedReply(rec.ReplyID)}
}

// queued is a call held back behind parked ones, as the reply lists it.
func (s parkStep) queued(c *callState) bus.Parked {
	return bus.Parked{ID: c.call.ID, Name: c.call.Name, Input: c.call.Input, Kind: bus.KindQueued,
		Subject: s.subj.Handoffs.Answer(c.call.Name)}
}

// resultsOf collects the results batch b has so far.
func resultsOf(b *batch) map[string]bus.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]bus.Result, len(b.calls))
	for _, c := range b.calls {
		if c.result != nil {
			out[c.call.ID] = *c.result
		}
	}
	return out
}

// settle hands a run with parked calls over to the continuation once its
// other calls finished; true when every answer came already and it goes on.
func (s parkStep) settle(b *batch, next int) bool {
	if b.cont.Phase == parked.PhaseParked { // Park wrote it waiting for its answers: no write here
		return false
	}
	ctx, cancel := s.landing.start(b.ctx)
	defer cancel()
	cont, resume, err := s.conts.Settle(ctx, b.session, b.replyID, resultsOf(b))
	if err != nil {
		b.p.log.Error("router: continuation not saved", "session", b.session, "reply", b.replyID, "err", err)
		return false
	}
	b.cont = cont
	if !resume {
		return false
	}
	b.mu.Lock()
	for _, c := range b.calls {
		if res, ok := cont.Results[c.call.ID]; ok && c.result == nil {
			c.result = &res // its event came from the router that took the answer
		}
	}
	b.mu.Unlock()
	setParked(b, nil)
	return true
}

// continuations runs the parked batches (docs/protocol.md 6.1).
type continuations struct {
	*wire
	life    *life.Life
	parked  *parked.Store
	led     *ledger.Ledger
	answers *answers

	pipe    *pipeline
	batches *runningBatches
}

// resume runs the rest of a batch whose awaited calls have all finished.
func (r *continuations) resume(cont *parked.Batch) {
	if b := r.continuation(cont); b != nil {
		defer r.batches.untrack(b)
		b.finishRest(b.run(cont.Next))
	}
}

// continuation rebuilds and tracks the batch of cont; nil (logged) when unusable.
func (r *continuations) continuation(cont *parked.Batch) *batch {
	b, err := r.pipe.fromContinuation(cont)
	if err != nil {
		r.log.Error("router: continuation unusable", "session", cont.Session, "reply", cont.ReplyID, "err", err)
		r.parked.Release(cont)
		return nil
	}
	r.batches.track(b)
	// A cancel that came before the track above wrote its marks (3.5): read them.
	b.p.conts.Marks(cont)
	return b
}

// finishRest ends a batch's run: batch.done when complete, else its events
// stored; a run cut off by the drain lets the lease go, and gets false.
func (b *batch) finishRest(complete bool) bool {
	switch {
	case b.cutOff():
		b.release()
		return false
	case complete:
		b.done()
	default:
		b.p.report.stored(b)
	}
	return true
}

// renewLeases renews every lease this router holds (parked, ledger).
func (r *continuations) renewLeases(now time.Time) {
	ctx, cancel := context.WithTimeout(r.life.Context(), 5*time.Second)
	defer cancel()
	if err := r.parked.Renew(ctx, now); err != nil {
		r.log.Warn("router: leases not renewed", "err", err)
	}
	if err := r.led.Renew(ctx, now); err != nil {
		r.log.Warn("router: ledger leases not renewed", "err", err)
	}
}

// takeOver takes over the continuations and answers of routers whose
// lease lapsed, and mends the batches they left (docs/protocol.md 6.1).
func (r *continuations) takeOver(now time.Time, lease time.Duration) {
	ctx, cancel := context.WithTimeout(r.life.Context(), 5*time.Second)
	defer cancel()
	// The owners' times in touched are their wall clocks: so is now.
	conts, answered := r.parked.TakeOver(ctx, now.Add(-lease))
	for _, cont := range conts { // as tracked work: false once the router is closing
		if !r.life.Go(func(context.Context) { r.repair(cont) }) {
			r.parked.Release(cont)
		}
	}
	for _, rec := range answered {
		r.life.Go(func(context.Context) { r.answers.settleTaken(rec) })
	}
	for _, rec := range r.parked.Mends.Stranded(ctx, lease) { // its notes' clock: less the time this router was held
		r.life.Go(func(context.Context) { r.answers.mend(rec) })
	}
	// Lone calls whose router is gone (1.13): batch.done goes out again.
	for _, rec := range r.parked.Mends.Lone(ctx) {
		r.life.Go(func(context.Context) { r.answers.complete(rec, *rec.Result) })
	}
}

// repair finishes a continuation taken over from a dead router: its last
// run's calls without a result run again (through the ledger), then it goes on.
func (r *continuations) repair(cont *parked.Batch) {
	b := r.continuation(cont)
	if b == nil {
		return
	}
	defer r.batches.untrack(b)
	b.resolveFrom(0)
	var wg sync.WaitGroup
	for _, c := range b.calls[:min(cont.Next, len(b.calls))] {
		if c.result != nil || slices.Contains(cont.Waiting, c.call.ID) {
			continue
		}
		if cont.IsCancelled(c.call.ID) {
			// Cancelled after the dead router started it (3.5): it ends interrupted.
			b.cancelled(c)
			continue
		}
		if c.early != nil {
			b.finish(c, *c.early)
			continue
		}
		wg.Go(func() { b.execute(c) })
	}
	wg.Wait()
	if b.cutOff() {
		b.release()
		return
	}
	b.finishRest(b.p.park.settle(b, cont.Next) && b.run(cont.Next))
}

// sweep expires the parked calls whose time is up.
func (r *continuations) sweep(now time.Time) {
	ctx, cancel := r.landing()
	defer cancel()
	for _, rec := range r.parked.Expire(ctx, now) {
		r.answers.complete(rec, *rec.Result)
	}
}

// cancelParked interrupts a reply's parked calls and marks its queued ones
// (canceller.end), its writes retried through the store's outage until the
// records' last expiry (they end expired then) or ctx ends (the router's
// stop): the agent is told interrupted by the end of a record only.
func (r *continuations) cancelParked(ctx context.Context, session, replyID string, ids []string) {
	until := time.Now().Add(landBudget) // the marks of a batch with no record here
	for _, rec := range r.parked.Read.Parked(session, replyID) {
		if rec.Expires.After(until) {
			until = rec.Expires
		}
	}
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	ended, err := r.parked.Cancel(ctx, session, replyID, ids)
	if err != nil {
		r.log.Warn("router: cancel not recorded", "session", session, "reply", replyID, "err", err)
	}
	for _, rec := range ended {
		r.answers.complete(rec, *rec.Result)
	}
}

// cancelEnds are the cancels this router has still to record in P_parked,
// by batch (canceller.end): one writer a batch, which takes the calls of
// the cancels that come meanwhile. An answer to a call named here is
// refused until then (answers.answer): the cancel came first here, and the
// agent is told interrupted once the record ends.
type cancelEnds struct {
	mu sync.Mutex
	m  map[batchRef]*cancelEnd
}

// cancelEnd is one batch's cancels to record.
type cancelEnd struct {
	ids     map[string]bool   // the calls named, at most bus.MaxCancelCalls (past all: unread)
	all     bool              // a cancel named every call
	parking []<-chan struct{} // the parks in flight to wait for first
	fresh   bool              // something came since the writer last took
}

// add notes a cancel of ids (all when empty) of ref, to record once parking
// closed; true when ref had no writer (the caller starts one).
func (e *cancelEnds) add(ref batchRef, ids []string, parking []<-chan struct{}) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, busy := e.m[ref]
	if !busy {
		if e.m == nil {
			e.m = map[batchRef]*cancelEnd{}
		}
		c = &cancelEnd{ids: map[string]bool{}}
		e.m[ref] = c
	}
	c.all = c.all || len(ids) == 0
	for _, id := range ids {
		if c.all || len(c.ids) == bus.MaxCancelCalls { // no batch has more calls
			break
		}
		c.ids[id] = true
	}
	for _, ch := range parking {
		if !slices.Contains(c.parking, ch) {
			c.parking = append(c.parking, ch)
		}
	}
	c.fresh = true
	return !busy
}

// take returns what ref's writer records next: every call named so far
// (nil: all) and the parks to wait for first; false, ref forgotten, when
// nothing came since it last took.
func (e *cancelEnds) take(ref batchRef) (ids []string, parking []<-chan struct{}, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.m[ref]
	if !c.fresh {
		delete(e.m, ref)
		return nil, nil, false
	}
	c.fresh, parking, c.parking = false, c.parking, nil
	if !c.all {
		ids = slices.Collect(maps.Keys(c.ids))
	}
	return ids, parking, true
}

// names reports whether a cancel still to record names call id of the batch.
func (e *cancelEnds) names(session, replyID, id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.m[batchRef{session, replyID}]
	return ok && (c.all || c.ids[id])
}

// sameAs refuses, before any call runs, a batch re-sent under the reply id
// of a batch with other calls (docs/protocol.md 3.1) that runs here (other)
// or parked; the rest is checked where the copy parks or meets a record.
// (A copy always came on its batch's subject: checkAsked, 1.18.)
func (s parkStep) sameAs(b *batch, other *batch) error {
	resumed := other != nil && other.start.IsZero()
	if other != nil && !resumed {
		if err := bus.SameCalls(b.replyID, other.data.Calls, b.data.Calls); err != nil {
			return err
		}
	}
	rec := s.conts.Held(b.session, b.replyID, b.data.Calls)
	if rec == nil && resumed {
		// other's calls are its continuation's, which holds large parked
		// inputs by their digests (1.20): the copy is compared with that.
		rec = &parked.Record{Session: b.session, ReplyID: b.replyID}
	}
	if rec == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if first, err := s.conts.Continuation(ctx, rec); err == nil {
		return first.Same(b.data.Calls)
	}
	return parked.SameRecorded(b.data.Calls, rec)
}

// reuse settles the calls an earlier copy parked that ended since; the rest park.
func (s parkStep) reuse(b *batch, calls []*callState, specs []parkSpec) ([]*callState, []parkSpec) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	var keep []*callState
	var keepSpecs []parkSpec
	for i, c := range calls {
		rec, err := s.conts.Get(ctx, bus.CallKey(b.session, b.replyID, c.call.ID))
		if err == nil {
			if differs := parked.SameRecorded(b.data.Calls, rec); differs != nil {
				// Another call under this call's key: this copy is refused (3.1).
				b.refused = differs
				return nil, nil
			}
		}
		if err == nil && rec.Status != bus.ParkParked && rec.Result != nil {
			b.settle(c, *rec.Result, fromPark) // the router that ended it reported it under the call's id (docs/protocol.md 3.1)
			continue
		}
		keep, keepSpecs = append(keep, c), append(keepSpecs, specs[i])
	}
	return keep, keepSpecs
}

// adopt fills the batch from got, an earlier copy's continuation (nil: gone
// or unreadable) and records (docs/protocol.md 6.1); a call without a
// record is listed as this copy decided it (spec).
func (s parkStep) adopt(ctx context.Context, b *batch, calls []*callState, specs []parkSpec, got parked.Parking) {
	stored := make(map[string]*parked.Record, len(got.Parked))
	for _, rec := range got.Parked {
		stored[rec.Call.ID] = rec
	}
	cont := got.Batch
	if cont == nil {
		// Gone (finished since this copy's create) or unreadable: the calls
		// are as their records say (docs/protocol.md 3.1), none queued.
		cont = &parked.Batch{Next: len(b.calls)}
		for _, rec := range got.Parked {
			cont.Waiting = append(cont.Waiting, rec.Call.ID)
		}
	}
	mine := make(map[string]parkSpec, len(calls))
	for i, c := range calls {
		mine[c.call.ID] = specs[i]
	}
	b.mu.Lock()
	for _, c := range b.calls {
		if res, ok := cont.Results[c.call.ID]; ok {
			c.result = &res
		}
	}
	b.mu.Unlock()
	var ps []bus.Parked // set at the end: running notices read it (running.go)
	for _, c := range b.calls {
		if !slices.Contains(cont.Waiting, c.call.ID) {
			continue
		}
		rec, err := stored[c.call.ID], error(nil)
		if rec == nil {
			rec, err = s.conts.Get(ctx, bus.CallKey(b.session, b.replyID, c.call.ID))
		}
		switch {
		case err == nil && rec.Status == bus.ParkParked:
			ps = append(ps, parkedOf(rec))
		case err == nil && rec.Result != nil:
			b.mu.Lock()
			c.result = rec.Result // its event came from the router that settled it
			b.mu.Unlock()
		default: // answered and not settled yet, or unreadable: it waits
			spec, ok := mine[c.call.ID]
			if !ok {
				spec = parkSpec{kind: bus.KindExternal}
			}
			ps = append(ps, bus.Parked{ID: c.call.ID, Name: c.call.Name, Input: c.call.Input, Kind: spec.kind,
				Subject: s.subj.Handoffs.Answer(c.call.Name), SuggestedRules: spec.suggested, Asked: bus.AskedReply(b.replyID)})
		}
	}
	for _, c := range b.calls[min(cont.Next, len(b.calls)):] {
		if c.result == nil {
			ps = append(ps, s.queued(c))
		}
	}
	setParked(b, ps)
}
