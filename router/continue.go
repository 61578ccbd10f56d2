package router

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/internal/pool"
	"github.com/toolbus/toolbus/parked"
)

// continuations runs the parked batches of this router's deployment
// (docs/protocol.md 6.1): it resumes a batch whose awaited calls have all
// finished, renews the leases of the work this router holds, takes over
// the work of routers that stopped renewing theirs, expires parked calls
// and cancels them.
type continuations struct {
	*wire
	life    *life.Life
	pool    *pool.Pool
	landing func() (context.Context, context.CancelFunc)
	parked  *parked.Store
	led     dedupe
	answers *answers

	fromContinuation func(cont *parked.Batch) (*batch, error)
	track, untrack   func(b *batch)
}

// resume runs the rest of a batch whose awaited calls have all finished.
func (r *continuations) resume(cont *parked.Batch) {
	if b := r.continuation(cont); b != nil {
		defer r.untrack(b)
		b.finishRest(b.run(cont.Next))
	}
}

// continuation rebuilds and tracks the batch of cont; nil (logged) when
// the record cannot be used. The caller untracks it.
func (r *continuations) continuation(cont *parked.Batch) *batch {
	b, err := r.fromContinuation(cont)
	if err != nil {
		r.log.Error("router: continuation unusable", "session", cont.Session, "reply", cont.ReplyID, "err", err)
		r.parked.Release(cont)
		return nil
	}
	r.track(b)
	return b
}

// finishRest ends a continuation's run: batch.done when every call has its
// result, else (it parked again) its events stored; a run cut off by the
// drain deadline lets the lease go, and another router takes it over.
func (b *batch) finishRest(complete bool) {
	switch {
	case b.cutOff():
		b.release()
	case complete:
		b.done()
	default:
		b.stored()
	}
}

// renewLeases renews the lease of every continuation, answered call and
// running ledger claim this router works on.
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

// takeOver repairs continuations whose owner stopped renewing its lease
// (a router that died while running part of a parked batch), and settles
// again the answers whose router died before it made their result (a
// confirmed call it was running never reported).
func (r *continuations) takeOver(now time.Time, lease time.Duration) {
	ctx, cancel := context.WithTimeout(r.life.Context(), 5*time.Second)
	defer cancel()
	cutoff := now.Add(-lease)
	conts, answered := r.parked.TakeOver(ctx, cutoff)
	for _, cont := range conts {
		if !r.background(func() { r.repair(cont) }) {
			r.parked.Release(cont)
		}
	}
	for _, rec := range answered {
		r.background(func() { r.answers.settleTaken(rec) })
	}
}

// background runs fn as work of the router (a drain waits for it); false
// when the router is closing and fn did not run.
func (r *continuations) background(fn func()) bool {
	if !r.life.Enter() {
		return false
	}
	r.pool.Go(func() { defer r.life.Leave(); fn() })
	return true
}

// repair finishes a continuation taken over from a router that died: the
// calls of its last run that never got a result run again (the ledger keeps
// side-effecting ones from running twice), then the batch waits for its
// answers or goes on.
func (r *continuations) repair(cont *parked.Batch) {
	b := r.continuation(cont)
	if b == nil {
		return
	}
	defer r.untrack(b)
	b.resolveFrom(0)
	var wg sync.WaitGroup
	for _, c := range b.calls[:min(cont.Next, len(b.calls))] {
		if c.result != nil || slices.Contains(cont.Waiting, c.call.ID) {
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
	b.finishRest(b.settleRun(cont.Next) && b.run(cont.Next))
}

// sweep expires the parked calls whose time is up.
func (r *continuations) sweep(now time.Time) {
	ctx, cancel := r.landing()
	defer cancel()
	for _, rec := range r.parked.Expire(ctx, now) {
		r.answers.complete(rec, *rec.Result)
	}
}

// cancelParked interrupts the parked calls of a reply (all when ids is
// empty) and marks its queued calls so they never run.
func (r *continuations) cancelParked(session, replyID string, ids []string) {
	ctx, cancel := r.landing()
	defer cancel()
	ended, err := r.parked.Cancel(ctx, session, replyID, ids)
	if err != nil {
		r.log.Warn("router: cancel not recorded", "session", session, "reply", replyID, "err", err)
	}
	for _, rec := range ended {
		r.answers.complete(rec, *rec.Result)
	}
}
