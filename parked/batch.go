package parked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Phase is where the continuation of a parked batch stands; each change
// is one compare-and-set of a Store verb, so racing routers agree on who
// has the batch (docs/parked.md):
//
//	Park:     (new) ─▶ running (lease held), or ─▶ parked when nothing else of the run runs
//	Settle:   running ─▶ parked, or ─▶ resumed when every answer came in during the run
//	Resume:   parked ─(last result)─▶ resumed (lease held), or ─▶ (deleted) when nothing is left
//	Park:     resumed ─▶ running | parked   the rest of the batch parks more calls
//	TakeOver: running|resumed, lease stale ─▶ resumed (another router holds it)
//	Finish:   running|resumed ─▶ (deleted)  batch.done was published
//
// A new batch whose only wait is its last call is carried in that call's
// record instead (Record.Batch, docs/protocol.md 6.1), and resumed with no
// write of its own.
type Phase string

const (
	// PhaseRunning: the router that parked calls is still finishing the
	// run they belong to.
	PhaseRunning Phase = "running"
	// PhaseParked: waiting for answers; whoever records the last one
	// resumes the batch.
	PhaseParked Phase = "parked"
	// PhaseResumed: a router runs the rest of the batch.
	PhaseResumed Phase = "resumed"
)

// Batch is the continuation of a batch that parked calls.
type Batch struct {
	Session     string                `json:"session"`
	ReplyID     string                `json:"reply_id"`
	TraceParent string                `json:"traceparent,omitempty"`
	TraceState  string                `json:"tracestate,omitempty"`
	Expiry      string                `json:"expirytime,omitempty"`
	Data        bus.Batch             `json:"data"`
	Results     map[string]bus.Result `json:"results"`
	Waiting     []string              `json:"waiting"`
	Next        int                   `json:"next"`
	Phase       Phase                 `json:"phase"`
	Cancelled   []string              `json:"cancelled,omitempty"`  // call ids to interrupt before they run; "*" for all
	ResumedBy   string                `json:"resumed_by,omitempty"` // why it resumed: the call whose result made it ready, "run" or "takeover"
	// Owner, while running or resumed, renews Touched (a lease); another
	// router takes the batch over once Touched is stale.
	Owner   string    `json:"owner,omitempty"`
	Touched time.Time `json:"touched"`

	rev  uint64
	gone bool // removed by the last result (Resume): Finish has nothing to delete
}

// last reports whether the result of call id is the last one b waits for
// while parked, with nothing of the batch left to run after it.
func (b *Batch) last(id string) bool {
	if b.Phase != PhaseParked || b.Next < len(b.Data.Calls) || !slices.Contains(b.Waiting, id) {
		return false
	}
	for _, w := range b.Waiting {
		if _, ok := b.Results[w]; !ok && w != id {
			return false
		}
	}
	return true
}

// Key returns the continuation's P_parked key, BatchKey(Session, ReplyID).
func (b *Batch) Key() string { return BatchKey(b.Session, b.ReplyID) }

// Active reports whether a router is working on the batch (running or
// resumed), as opposed to waiting for answers.
func (b *Batch) Active() bool { return b.Phase == PhaseRunning || b.Phase == PhaseResumed }

// Ready reports whether every awaited call has its result.
func (b *Batch) Ready() bool {
	for _, id := range b.Waiting {
		if _, ok := b.Results[id]; !ok {
			return false
		}
	}
	return true
}

// IsCancelled reports whether the agent cancelled call id while the batch
// was parked (or cancelled every call).
func (b *Batch) IsCancelled(id string) bool {
	return slices.Contains(b.Cancelled, "*") || slices.Contains(b.Cancelled, id)
}

// conts holds the continuations of parked batches (keys <session>.<replyid>).
type conts struct {
	shared

	mu     sync.RWMutex
	active map[string]*Batch  // continuations running or resumed, for lease takeovers
	leases leaseSet[batchKey] // continuations this router works on and renews
	watch  *store.Watch
}

// start loads the cache of continuations and keeps it fed.
func (s *conts) start(ctx context.Context) (err error) {
	s.watch, err = watch(ctx, s.kv, "*.*", s.applyBatch)
	return err
}

// claim makes owner (the store's router) the batch's owner in phase p.
func claim(b *Batch, owner string, p Phase, why string) {
	b.Phase, b.Owner, b.Touched = p, owner, time.Now().UTC()
	if why != "" {
		b.ResumedBy = why
	}
}

// errParkedBefore: an earlier copy of the batch parked first.
var errParkedBefore = errors.New("parked: this batch parked before")

// parkBatch records that the batch parks calls: its results so far, the
// calls it waits for and the index after its current run. While the run
// goes on this router holds the lease (running); a settled run waits for
// its answers at once (parked). A new batch is created (errParkedBefore: a
// copy parked first); a resumed one is updated while this router owns it.
func (s *conts) parkBatch(ctx context.Context, b *Batch, results map[string]bus.Result, waiting []string, next int, settled bool) error {
	phase := func(b *Batch) {
		claim(b, s.cfg.Owner, PhaseRunning, "")
		if settled {
			b.Phase, b.Owner = PhaseParked, ""
		}
	}
	if b.rev != 0 {
		got, err := s.update(ctx, b.Session, b.ReplyID, func(cur *Batch) error {
			if cur.Owner != s.cfg.Owner || !cur.Active() {
				return fmt.Errorf("parked: batch %s: %w (taken over by %s)", b.Key(), errNotOwner, cur.Owner)
			}
			for id, res := range results {
				cur.Results[id] = res
			}
			cur.Waiting, cur.Next = waiting, next
			phase(cur)
			return nil
		})
		if err != nil {
			return err
		}
		*b = *got
		s.track(b)
		return nil
	}
	b.Results, b.Waiting, b.Next = results, waiting, next
	phase(b)
	v, err := json.Marshal(b)
	if err != nil {
		return err
	}
	rev, err := store.Create(ctx, s.kv, b.Key(), v, store.Bounded)
	switch {
	case store.IsConflict(err):
		return errParkedBefore
	case err != nil:
		return fmt.Errorf("parked: batch %s: %w", b.Key(), err)
	}
	b.rev = rev
	s.track(b)
	return nil
}

// complete records the result of a parked call of the batch; the one
// completion that finds it ready resumes it (true, the lease held).
func (s *conts) complete(ctx context.Context, session, replyID, callID string, res bus.Result) (*Batch, bool, error) {
	var resume bool
	b, err := s.update(ctx, session, replyID, func(b *Batch) error {
		resume = false
		b.Results[callID] = res
		if b.Phase == PhaseParked && b.Ready() {
			claim(b, s.cfg.Owner, PhaseResumed, callID)
			resume = true
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if resume {
		s.leases.hold(batchKey(b.Key()))
	}
	return b, resume, nil
}

// cancel marks calls of a parked batch (all when ids is empty) so that
// they never run; a batch that never parked is no error.
func (s *conts) cancel(ctx context.Context, session, replyID string, ids []string) error {
	marks := ids
	if len(marks) == 0 {
		marks = []string{"*"}
	}
	_, err := s.update(ctx, session, replyID, func(b *Batch) error {
		for _, id := range marks {
			if !slices.Contains(b.Cancelled, id) {
				b.Cancelled = append(b.Cancelled, id)
			}
		}
		return nil
	})
	if store.IsNotFound(err) {
		return nil
	}
	return err
}

// takeOver claims the active batches whose owner has not renewed its lease
// since cutoff; the batches returned are this router's to repair.
func (s *conts) takeOver(ctx context.Context, cutoff time.Time) []*Batch {
	var out []*Batch
	for _, stale := range s.stale(cutoff) {
		if stale.Owner == s.cfg.Owner && s.leases.holds(batchKey(stale.Key())) {
			continue // this router is working on it: its renewal is late, not gone
		}
		b, err := s.update(ctx, stale.Session, stale.ReplyID, func(b *Batch) error {
			if !b.Active() || !b.Touched.Before(cutoff) {
				return errNotOwner
			}
			s.cfg.Logger.Warn("parked: taking over a batch whose router stopped", "session", b.Session, "reply", b.ReplyID, "owner", b.Owner)
			claim(b, s.cfg.Owner, PhaseResumed, "takeover")
			return nil
		})
		if err == nil {
			s.leases.hold(batchKey(b.Key()))
			out = append(out, b)
		}
	}
	return out
}

// remove deletes b, read at its revision, as the last result of a batch
// with nothing left to run: the compare-and-set makes that result's router
// the one that resumes it. Only the last result removes a continuation, so
// a delete whose outcome is unknown (a lost acknowledgement, a leader
// change) landed when the key is gone; false when b changed meanwhile.
func (s *conts) remove(ctx context.Context, b *Batch) bool {
	err := store.Retry(ctx, store.UntilLanded, func(ctx context.Context) error {
		if s.kv.Delete(ctx, b.Key(), jetstream.LastRevision(b.rev)) == nil {
			return nil
		}
		_, err := s.kv.Get(ctx, b.Key())
		switch {
		case store.IsNotFound(err):
			return nil
		case err == nil:
			return store.Permanent(errChanged) // not a transient error: trying again never lands
		}
		return err // unknown yet: try again
	})
	b.gone = err == nil
	return b.gone
}

var errChanged = errors.New("parked: the continuation changed")

// update applies fn (which may run more than once; its error writes
// nothing) to the latest continuation with compare-and-set, retried until
// it lands or ctx ends: it records results that end calls. It returns an
// error satisfying store.IsNotFound when there is no continuation.
func (s *conts) update(ctx context.Context, session, replyID string, fn func(*Batch) error) (*Batch, error) {
	key := BatchKey(session, replyID)
	b, rev, err := cas(ctx, s.kv, key, store.UntilLanded, fmt.Errorf("parked: batch %s: %w", key, jetstream.ErrKeyNotFound), func(b *Batch) error {
		if b.Results == nil {
			b.Results = map[string]bus.Result{}
		}
		return fn(b)
	})
	if err != nil {
		return nil, err
	}
	b.rev = rev
	return b, nil
}

// track holds b's lease while this router owns it, and reports whether it does.
func (s *conts) track(b *Batch) bool {
	if b.Active() && b.Owner == s.cfg.Owner {
		s.leases.hold(batchKey(b.Key()))
		return true
	}
	s.leases.release(batchKey(b.Key()))
	return false
}

// applyBatch keeps the cache of continuations routers are working on.
func (s *conts) applyBatch(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := e.Key()
	if old, ok := s.active[key]; ok && old.rev >= e.Revision() {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.active, key)
		return
	}
	var b Batch
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		return
	}
	b.rev = e.Revision()
	if b.Active() {
		s.active[key] = &b
	} else {
		delete(s.active, key)
	}
}

// stale returns, from the cache, the active continuations whose lease was
// last renewed before cutoff.
func (s *conts) stale(cutoff time.Time) []*Batch {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*Batch
	for _, b := range s.active {
		if b.Touched.Before(cutoff) {
			out = append(out, b)
		}
	}
	return out
}
