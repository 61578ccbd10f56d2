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
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
