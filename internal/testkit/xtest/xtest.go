// Package xtest starts a whole toolbus deployment in process, for the
// integration tests (test/embedded, test/conformance, the command tests)
// and for the benchmark (bench): a real nats-server with JetStream (one
// node, or a 3-node cluster with every bucket and stream replicated three
// times), N routers, and workers with their tools. It is internal because
// it links the router and must not become public API.
//
// Readiness is seen through the protocol only, as an operator would see
// it, never through router internals: WaitLive and WaitGone ask every
// router for its P.admin.status until each one that serves reports the
// tools live (or gone), and EveryRouter does the same for any request
// (a P.tools.<session> listing, a P.admin.session.get).
//
//	d, err := xtest.Start(ctx, xtest.Config{Routers: 2})
//	defer d.Close()
//	w, err := d.AddWorker(ctx, xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
//		return worker.Register(w, def, handler)
//	}})
//	err = d.WaitLive(ctx, "echo")
//
// Tests use Run, which fails the test on error and closes the deployment
// when the test ends. Every method returns errors instead of failing a
// test, so that the benchmark (a command, not a test) can use them too.
package xtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// Roles name the part of a deployment a connection serves; Config.Around
// gets them.
const (
	RoleRouter = "router"
	RoleWorker = "worker"
	RoleClient = "client"
)

// Defaults for the tests: a heartbeat short enough that a worker that left
// is gone within a couple of seconds, and a bound generous enough for a
// busy two-core machine under -race.
const (
	DefaultHeartbeat = 500 * time.Millisecond
	DefaultBound     = 10 * time.Second
)

// Config describes a deployment. The zero value is one nats-server node and
// no router.
type Config struct {
	// Cluster starts a 3-node cluster and replicates every bucket and
	// stream three times (Router.Store.Replicas is set to 3).
	Cluster bool
	// Server, when set, is an already running nats-server to deploy on
	// (several deployments with different prefixes on one server); Close
	// leaves it running.
	Server *server.Server
	// Dir holds the servers' stores; "" means a temporary directory that
	// Close removes.
	Dir string
	// Routers is how many routers Start starts.
	Routers int
	// Router is the configuration of every router; Store.Heartbeat
	// defaults to Heartbeat. Each router gets its own copy (and its own ID
	// unless one is set).
	Router router.Config
	// Heartbeat of the routers and the workers; zero means DefaultHeartbeat.
	Heartbeat time.Duration
	// Bound limits every wait (worker registration, WaitLive, EveryRouter)
	// on top of the caller's context; zero means DefaultBound.
	Bound time.Duration
	// Options are added to every connection the deployment opens.
	Options []nats.Option
	// Around, when set, runs every connect and every Start of a router or
	// a worker, so that goroutines they spawn inherit what it sets up (the
	// benchmark labels them for its CPU profile).
	Around func(ctx context.Context, role string, fn func(context.Context))
}

// Deployment is a running deployment, in three parts it embeds: the Net
// (servers and connections), the Fleet (routers and workers) and the
// Readiness (the waits). Its fields are for reading; tests that stop or
// kill a router themselves (Stop, Drain, closing its connection) need not
// tell the deployment: routers that are closed or have lost their
// connection are skipped by the waits.
type Deployment struct {
	*Net
	*Fleet
	*Readiness
}

// Run is Start for a test: it fails t on error and closes the deployment
// when t ends. Dir defaults to t.TempDir().
func Run(t testing.TB, cfg Config) *Deployment {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	d, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// Start starts the servers and cfg.Routers routers, and returns once every
// node of a cluster sees a router's subscriptions (interest travels
// between nodes a moment after a router subscribes).
func Start(ctx context.Context, cfg Config) (d *Deployment, err error) {
	cfg = cfg.withDefaults()
	net := newNet(cfg)
	fleet := newFleet(net, cfg)
	d = &Deployment{Net: net, Fleet: fleet, Readiness: newReadiness(net, fleet, cfg)}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	if err := d.Net.start(cfg.Cluster); err != nil {
		return nil, err
	}
	for range cfg.Routers {
		if _, err := d.AddRouter(ctx); err != nil {
			return nil, err
		}
	}
	if err := d.waitServed(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// withDefaults returns cfg with its zero durations set, and three replicas
// on a cluster.
func (cfg Config) withDefaults() Config {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Bound <= 0 {
		cfg.Bound = DefaultBound
	}
	if cfg.Router.Store.Heartbeat <= 0 {
		cfg.Router.Store.Heartbeat = cfg.Heartbeat
	}
	if cfg.Cluster {
		cfg.Router.Store.Replicas = 3
	}
	return cfg
}

// StopTimeout bounds how long Close waits for each worker and router to
// drain.
const StopTimeout = 10 * time.Second

// Close stops everything the deployment started, in reverse order: the
// workers, then the routers (each set draining at once), the connections,
// the servers, and the temporary store directory. It is safe to call
// after a test stopped some of them itself.
func (d *Deployment) Close() {
	workers, routers := d.Fleet.take()
	d.Readiness.forget()
	conns := d.Net.take()
	drainAll(workers, func(w *worker.Worker, ctx context.Context) { _ = w.Drain(ctx) })
	drainAll(routers, func(r *router.Router, ctx context.Context) { _ = r.Drain(ctx) })
	d.Net.shutdown(conns)
}

func drainAll[T any](xs []T, drain func(T, context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, x := range xs {
		wg.Go(func() { drain(x, ctx) })
	}
	wg.Wait()
}

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
