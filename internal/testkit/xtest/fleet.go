package xtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// Fleet is the toolbus side of a deployment: the routers and the workers
// it started, each on a connection of the Net. A Deployment embeds it;
// its fields are for reading.
type Fleet struct {
	Routers []*router.Router // every router started, in order
	// RouterConns[i] is the connection of Routers[i] (close it to kill the
	// router).
	RouterConns []*nats.Conn

	net       *Net
	router    router.Config // Config.Router, defaults applied
	subj      bus.Subjects
	heartbeat time.Duration
	bound     time.Duration

	mu      sync.Mutex // Routers, RouterConns, workers
	workers []*worker.Worker
}

func newFleet(net *Net, cfg Config) *Fleet {
	return &Fleet{net: net, router: cfg.Router, subj: bus.NewSubjects(cfg.Router.Prefix),
		heartbeat: cfg.Heartbeat, bound: cfg.Bound}
}

// Subjects are the deployment's subjects (Config.Router.Prefix).
func (f *Fleet) Subjects() bus.Subjects { return f.subj }

// Heartbeat is the routers' and workers' heartbeat.
func (f *Fleet) Heartbeat() time.Duration { return f.heartbeat }

// AddRouter starts one more router, with Config.Router, on its own
// connection.
func (f *Fleet) AddRouter(ctx context.Context) (*router.Router, error) {
	nc, err := f.net.Connect(ctx, RoleRouter)
	if err != nil {
		return nil, err
	}
	r, err := router.New(nc, f.router)
	if err != nil {
		return nil, fmt.Errorf("xtest: router: %w", err)
	}
	f.net.around(ctx, RoleRouter, func(ctx context.Context) { err = r.Start(ctx) })
	if err != nil {
		return nil, fmt.Errorf("xtest: start router: %w", err)
	}
	f.mu.Lock()
	f.Routers = append(f.Routers, r)
	f.RouterConns = append(f.RouterConns, nc)
	f.mu.Unlock()
	return r, nil
}

// WorkerSpec describes a worker for AddWorker.
type WorkerSpec struct {
	// Config of the worker; Heartbeat defaults to the deployment's.
	Config worker.Config
	// Conn is the worker's connection; nil means a new one (a test passes
	// its own to close it and simulate a crash).
	Conn *nats.Conn
	// Setup adds the worker's tools before it starts.
	Setup func(*worker.Worker) error
}

// AddWorker starts a worker and returns once a router has acknowledged its
// registration; Close drains it. Routers other than the one that took the
// registration see the tools a moment later: WaitLive waits for them all.
func (f *Fleet) AddWorker(ctx context.Context, spec WorkerSpec) (*worker.Worker, error) {
	nc := spec.Conn
	if nc == nil {
		var err error
		if nc, err = f.net.Connect(ctx, RoleWorker); err != nil {
			return nil, err
		}
	}
	if spec.Config.Heartbeat <= 0 {
		spec.Config.Heartbeat = f.heartbeat
	}
	if spec.Config.Prefix == "" {
		spec.Config.Prefix = f.router.Prefix
	}
	w, err := worker.New(nc, spec.Config)
	if err != nil {
		return nil, fmt.Errorf("xtest: worker: %w", err)
	}
	if spec.Setup != nil {
		if err := spec.Setup(w); err != nil {
			return nil, fmt.Errorf("xtest: worker tools: %w", err)
		}
	}
	f.net.around(ctx, RoleWorker, func(ctx context.Context) { err = w.Start(ctx) })
	if err != nil {
		return nil, fmt.Errorf("xtest: start worker: %w", err)
	}
	f.mu.Lock()
	f.workers = append(f.workers, w)
	f.mu.Unlock()
	t := time.NewTimer(f.bound)
	defer t.Stop()
	select {
	case <-w.Registered():
		return w, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("xtest: worker %s not registered after %v", w.ID(), f.bound)
	}
}

// serving returns the ids of the routers that still serve: neither closed
// nor cut off from the server.
func (f *Fleet) serving() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for i, r := range f.Routers {
		select {
		case <-r.Closed():
			continue
		default:
		}
		if f.RouterConns[i].IsClosed() {
			continue
		}
		out[r.ID()] = true
	}
	return out
}

// started reports whether any router was started.
func (f *Fleet) started() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.Routers) > 0
}

// take returns the workers and the routers and forgets the workers (a
// test may still read Routers after Close).
func (f *Fleet) take() ([]*worker.Worker, []*router.Router) {
	f.mu.Lock()
	defer f.mu.Unlock()
	workers := f.workers
	f.workers = nil
	return workers, f.Routers
}
