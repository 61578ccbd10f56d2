package external

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Batch phases.
const (
	PhaseRunning = "running" // the router that parked is still finishing the run
	PhaseParked  = "parked"  // waiting for answers; whoever records the last one resumes
	PhaseResumed = "resumed" // a router is running the rest
	PhaseDone    = "done"
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
	Phase       string                `json:"phase"`
	Cancelled   []string              `json:"cancelled,omitempty"`  // call ids to interrupt before they run; "*" for all
	ResumedBy   string                `json:"resumed_by,omitempty"` // the call whose result made it ready, or "run"
	// Owner is the router working on the batch while it is running or
	// resumed; it renews Touched (a lease) and another router takes the
	// batch over once Touched is stale.
	Owner   string    `json:"owner,omitempty"`
	Touched time.Time `json:"touched"`

	rev uint64
}

// Active reports whether a router is working on the batch (running or
// resumed), as opposed to waiting for answers or finished.
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

// GetBatch reads a continuation.
func (s *Store) GetBatch(ctx context.Context, session, replyID string) (*Batch, error) {
	e, err := s.kv.Get(ctx, BatchKey(session, replyID))
	if err != nil {
		return nil, err
	}
	var b Batch
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		return nil, fmt.Errorf("external: batch %s is corrupt: %w", BatchKey(session, replyID), err)
	}
	b.rev = e.Revision()
	return &b, nil
}

// PutBatch writes a continuation: created when new (rev 0), else with
// compare-and-set against the revision it was read at. It returns an error
// satisfying store.IsConflict when the continuation exists already (rev 0)
// or moved on. Transient JetStream errors are retried within store.Bounded.
func (s *Store) PutBatch(ctx context.Context, b *Batch) error {
	v, err := json.Marshal(b)
	if err != nil {
		return err
	}
	key := BatchKey(b.Session, b.ReplyID)
	rev, err := store.Update(ctx, s.kv, key, store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if cur == nil && b.rev != 0 || cur != nil && cur.Revision() != b.rev {
			return nil, jetstream.ErrKeyExists
		}
		return v, nil
	})
	if err != nil {
		return fmt.Errorf("external: batch %s: %w", key, err)
	}
	b.rev = rev
	return nil
}

// UpdateBatch applies fn to the latest continuation with compare-and-set.
// fn may run more than once; an error from it ends the update with nothing
// written. A continuation records results that end calls, so conflicts and
// transient errors are retried until the write lands or ctx ends
// (store.UntilLanded). It returns an error satisfying store.IsNotFound when
// there is no continuation.
func (s *Store) UpdateBatch(ctx context.Context, session, replyID string, fn func(*Batch) error) (*Batch, error) {
	key := BatchKey(session, replyID)
	var b *Batch
	rev, err := store.Update(ctx, s.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if cur == nil {
			return nil, fmt.Errorf("external: batch %s: %w", key, jetstream.ErrKeyNotFound)
		}
		b = new(Batch)
		if err := json.Unmarshal(cur.Value(), b); err != nil {
			return nil, fmt.Errorf("external: batch %s is corrupt: %w", key, err)
		}
		if err := fn(b); err != nil {
			return nil, err
		}
		return json.Marshal(b)
	})
	if err != nil {
		return nil, err
	}
	b.rev = rev
	return b, nil
}

// DeleteBatch removes a finished batch's continuation.
func (s *Store) DeleteBatch(ctx context.Context, b *Batch) error {
	if _, err := store.Delete(ctx, s.kv, BatchKey(b.Session, b.ReplyID), store.Bounded); err != nil {
		return fmt.Errorf("external: delete batch %s: %w", BatchKey(b.Session, b.ReplyID), err)
	}
	return nil
}

// applyBatch keeps the cache of continuations a router is working on.
func (s *Store) applyBatch(e jetstream.KeyValueEntry) {
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

// Stale returns the continuations that are running or resumed but whose
// owner has not renewed its lease since before cutoff.
func (s *Store) Stale(cutoff time.Time) []*Batch {
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
