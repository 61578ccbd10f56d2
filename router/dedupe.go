package router

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/store"
)

// Dedupe: a batch re-sent with the same (session, reply id) must not run
// anything twice and must answer what the first copy got. A call that is
// not read-only has its P_ledger entry (once); a batch that parked, its
// continuation (parkStep.adopt); a parked call that settled since, its
// P_parked record (parkStep.reuse). Read-only calls run again.

// reuse finishes, with the result an earlier copy of this batch recorded,
// each call that copy parked and that has settled since. It returns the
// calls still to park.
func (s parkStep) reuse(b *batch, calls []*callState, specs []parkSpec) ([]*callState, []parkSpec) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	var keep []*callState
	var keepSpecs []parkSpec
	for i, c := range calls {
		rec, err := s.conts.Get(ctx, bus.CallKey(b.session, b.replyID, c.call.ID))
		if err == nil && rec.Status != bus.ParkParked && rec.Result != nil {
			b.finish(c, *rec.Result)
			continue
		}
		keep, keepSpecs = append(keep, c), append(keepSpecs, specs[i])
	}
	return keep, keepSpecs
}

// adopt fills the batch from cont, the continuation an earlier copy of this
// batch left (nil: nothing to adopt). Each awaited call is read from KV,
// not the cache: the earlier copy may still be parking it, and is then
// described as this copy decided it (spec), as the earlier copy parks it.
func (s parkStep) adopt(ctx context.Context, b *batch, calls []*callState, specs []parkSpec, cont *parked.Batch) {
	if cont == nil {
		return
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
	b.parked = b.parked[:0]
	for _, c := range b.calls {
		if !slices.Contains(cont.Waiting, c.call.ID) {
			continue
		}
		rec, err := s.conts.Get(ctx, bus.CallKey(b.session, b.replyID, c.call.ID))
		switch {
		case err == nil && rec.Status == bus.ParkParked:
			b.parked = append(b.parked, parkedOf(rec))
		case err == nil && rec.Result != nil:
			b.mu.Lock()
			c.result = rec.Result // its event came from the router that settled it
			b.mu.Unlock()
		default: // being parked, or answered and not settled yet: it waits
			spec, ok := mine[c.call.ID]
			if !ok {
				spec = parkSpec{kind: bus.KindExternal}
			}
			b.parked = append(b.parked, bus.Parked{ID: c.call.ID, Name: c.call.Name, Input: c.call.Input, Kind: spec.kind,
				Subject: s.subj.Handoffs.Answer(c.call.Name), SuggestedRules: spec.suggested})
		}
	}
	for _, c := range b.calls[min(cont.Next, len(b.calls)):] {
		if c.result == nil {
			b.parked = append(b.parked, s.queued(c))
		}
	}
}

// once is the ledger middleware over l: a call that is not read-only runs
// through next at most once per call key, and its result is recorded.
func once(l onceRunner) Middleware {
	return func(next Executor) Executor {
		return ExecFunc(func(ctx context.Context, j *job) bus.Result {
			def := &j.tool.Def
			if def.ReadOnly {
				return next.Exec(ctx, j)
			}
			timeout := time.Duration(def.TimeoutMS) * time.Millisecond * time.Duration(max(def.MaxAttempts, 1))
			return l.Once(ctx, ledgerCall(j, timeout), func() bus.Result { return next.Exec(ctx, j) })
		})
	}
}

// onceRunner is what the middleware uses of ledger.Ledger.
type onceRunner interface {
	Once(ctx context.Context, c ledger.Call, run func() bus.Result) bus.Result
}

// ledgerCall is what the ledger knows of j, whose run may take timeout.
func ledgerCall(j *job, timeout time.Duration) ledger.Call {
	def := &j.tool.Def
	return ledger.Call{Key: j.key(), Call: j.call, Timeout: timeout, Expiry: j.deadline,
		Retry: def.Idempotent && def.MaxAttempts > 1, Durable: def.Durable}
}

// storeFullOr is res, a call's "No live worker" result, unless the store
// is full: then the workers' heartbeats are refused too, and the honest
// answer is that the store is full (docs/protocol.md 3.3, `internal`).
func storeFullOr(c bus.Call, h *store.Health, res *bus.Result) *bus.Result {
	full, why, _ := h.Full()
	if !full {
		return res
	}
	r := bus.ErrorResult(c, bus.CodeInternal, fmt.Sprintf(
		"InternalError: %s: no live worker of tool '%s' can be seen while JetStream refuses the workers' heartbeats (%s); it did not run. Call it again once the operator has freed space.", store.FullText, c.Name, why))
	return &r
}
