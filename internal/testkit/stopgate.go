package testkit

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// StopGate is a KV bucket whose watches' stops wait until Open: a slow
// consumer delete, so a test can tell whether a caller waits for it.
type StopGate struct {
	jetstream.KeyValue
	// Stopping receives a value when a stop reaches the gate (buffered:
	// 1024 stops; more block the stops until it is read).
	Stopping chan struct{}
	// Stopped receives a value when a stop has returned (buffered, as
	// Stopping).
	Stopped chan struct{}

	open chan struct{}
	once sync.Once
}

// GateStops returns kv with its watches' stops held until Open.
func GateStops(kv jetstream.KeyValue) *StopGate {
	return &StopGate{KeyValue: kv, Stopping: make(chan struct{}, 1024), Stopped: make(chan struct{}, 1024), open: make(chan struct{})}
}

// Open lets every stop through, those waiting and those to come. It is safe
// to call twice.
func (g *StopGate) Open() { g.once.Do(func() { close(g.open) }) }

// Watch is the bucket's, with a stop that waits for the gate.
func (g *StopGate) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := g.KeyValue.Watch(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	return gatedWatch{w, g}, nil
}

type gatedWatch struct {
	jetstream.KeyWatcher
	g *StopGate
}

func (w gatedWatch) Stop() error {
	w.g.Stopping <- struct{}{}
	<-w.g.open
	err := w.KeyWatcher.Stop()
	w.g.Stopped <- struct{}{}
	return err
}
