package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/life"
)

// Watch feeds a cache from a KV bucket: it calls apply for every current
// entry of keys (a subject filter, ">" for all), then for every later put,
// delete or purge (entry.Operation() tells which), in revision order, from one
// goroutine. Ready is closed once the initial values have been applied.
// The watch ends when ctx ends or Stop is called.
type Watch struct {
	ready chan struct{}
	done  chan struct{}
	stop  func() error
	once  sync.Once

	mu      sync.Mutex
	applied uint64 // the revision of the last entry applied
	waiters []reachWaiter
}

// reachWaiter is a Reached call waiting for a revision.
type reachWaiter struct {
	rev  uint64
	done chan struct{}
}

// WatchKV starts a Watch. It returns an error when the watch cannot start.
func WatchKV(ctx context.Context, kv jetstream.KeyValue, keys string, apply func(jetstream.KeyValueEntry), opts ...jetstream.WatchOpt) (*Watch, error) {
	w, err := kv.Watch(ctx, keys, opts...)
	if err != nil {
		return nil, fmt.Errorf("store: watch %s %s: %w", kv.Bucket(), keys, err)
	}
	cw := &Watch{ready: make(chan struct{}), done: make(chan struct{}), stop: w.Stop}
	loaded := sync.OnceFunc(func() { close(cw.ready) }) // at the first nil entry
	go func() {
		defer close(cw.done)
		for {
			select {
			case <-ctx.Done():
				_ = w.Stop()
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					loaded()
					continue
				}
				apply(e)
				cw.reach(e.Revision())
			}
		}
	}()
	return cw, nil
}

// WatchLoaded is WatchKV that returns once the initial values are applied;
// when ctx ends first it stops the watch and returns ctx's error.
func WatchLoaded(ctx context.Context, kv jetstream.KeyValue, keys string, apply func(jetstream.KeyValueEntry)) (*Watch, error) {
	w, err := WatchKV(ctx, kv, keys, apply)
	if err != nil {
		return nil, err
	}
	select {
	case <-w.ready:
		return w, nil
	case <-ctx.Done():
		_ = w.Stop(context.WithoutCancel(ctx))
		return nil, ctx.Err()
	}
}

// reach notes that the entry at rev is applied, and wakes the Reached
// calls it satisfies.
func (w *Watch) reach(rev uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = max(w.applied, rev)
	keep := w.waiters[:0]
	for _, r := range w.waiters {
		if r.rev <= w.applied {
			close(r.done)
		} else {
			keep = append(keep, r)
		}
	}
	clear(w.waiters[len(keep):])
	w.waiters = keep
}

// Reached waits until the watch has applied the entry at revision rev (a
// stream sequence of the bucket, as KV.LastRevision gives it) or one after
// it: then every write to its keys up to rev is in the cache it feeds, in
// stream order. It returns an error when ctx ends or the watch ends first.
func (w *Watch) Reached(ctx context.Context, rev uint64) error {
	w.mu.Lock()
	if w.applied >= rev {
		w.mu.Unlock()
		return nil
	}
	r := reachWaiter{rev: rev, done: make(chan struct{})}
	w.waiters = append(w.waiters, r)
	w.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-w.done:
		return errors.New("store: the watch ended")
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		w.waiters = slices.DeleteFunc(w.waiters, func(x reachWaiter) bool { return x.done == r.done })
		return fmt.Errorf("store: watch at revision %d of %d: %w", w.applied, rev, ctx.Err())
	}
}

// Ready is closed once the initial values are loaded.
func (w *Watch) Ready() <-chan struct{} { return w.ready }

// Ended reports whether the watch has ended (stopped, its context ended, or
// its updates closed).
func (w *Watch) Ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// StopAll stops every watch of ws that is not nil, each bounded by ctx,
// and joins their errors.
func StopAll(ctx context.Context, ws ...*Watch) error {
	var errs []error
	for _, w := range ws {
		if w != nil {
			errs = append(errs, w.Stop(ctx))
		}
	}
	return errors.Join(errs...)
}

// Stop ends the watch and waits for its goroutine until ctx ends (then it
// returns ctx's error; the goroutine still ends on its own). It is safe to
// call twice and concurrently.
func (w *Watch) Stop(ctx context.Context) error {
	w.once.Do(func() { _ = w.stop() })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("store: watch stop: %w", ctx.Err())
	}
}

// Stops stops KV watches off their callers' paths: a KeyWatcher's Stop
// deletes its consumer synchronously, up to 5 s through a meta leader
// change (docs/store.md). Past MaxStops in flight a stop runs on its
// caller's goroutine. The zero value is usable.
type Stops struct {
	// Landing, when set, gives the context each background stop holds
	// while it runs (life.Life.Landing); its cancel is called when the
	// stop returns.
	Landing func() (context.Context, context.CancelFunc)

	wg       sync.WaitGroup
	inFlight atomic.Int64
}

// MaxStops bounds the watches' stops a Stops runs in the background at once.
const MaxStops = 256

// Go stops w in the background, or before it returns when MaxStops are in
// flight. Its error is discarded: the UNSUB goes out first, and the server
// removes an ephemeral consumer whose delete failed after 5 s without
// interest.
func (s *Stops) Go(w jetstream.KeyWatcher) {
	if s.inFlight.Add(1) > MaxStops {
		s.inFlight.Add(-1)
		_ = w.Stop()
		return
	}
	done := func() {}
	if s.Landing != nil {
		_, done = s.Landing()
	}
	s.wg.Go(func() {
		defer s.inFlight.Add(-1)
		defer done()
		_ = w.Stop()
	})
}

// InFlight is the number of stops running in the background.
func (s *Stops) InFlight() int { return int(s.inFlight.Load()) }

// Wait waits until the stops in flight have returned, or until ctx ends
// (then it returns an error; the stops still end on their own, each bounded
// by its request's wait).
func (s *Stops) Wait(ctx context.Context) error {
	if !life.WaitFor(ctx, &s.wg) {
		return fmt.Errorf("store: %d watch stops still in flight: %w", s.InFlight(), ctx.Err())
	}
	return nil
}
