package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
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
}

// WatchKV starts a Watch. It returns an error when the watch cannot start.
func WatchKV(ctx context.Context, kv jetstream.KeyValue, keys string, apply func(jetstream.KeyValueEntry), opts ...jetstream.WatchOpt) (*Watch, error) {
	w, err := kv.Watch(ctx, keys, opts...)
	if err != nil {
		return nil, fmt.Errorf("store: watch %s %s: %w", kv.Bucket(), keys, err)
	}
	cw := &Watch{ready: make(chan struct{}), done: make(chan struct{}), stop: w.Stop}
	go func() {
		defer close(cw.done)
		initial := true
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
					if initial {
						initial = false
						close(cw.ready)
					}
					continue
				}
				apply(e)
			}
		}
	}()
	return cw, nil
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
