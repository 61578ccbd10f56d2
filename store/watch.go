package store

import (
	"context"
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
func WatchKV(ctx context.Context, kv jetstream.KeyValue, keys string, apply func(jetstream.KeyValueEntry)) (*Watch, error) {
	w, err := kv.Watch(ctx, keys)
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

// Stop ends the watch and waits for its goroutine. It is safe to call twice.
func (w *Watch) Stop() {
	w.once.Do(func() { _ = w.stop() })
	<-w.done
}
