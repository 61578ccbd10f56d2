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
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
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

// Deployment is a running deployment. Its fields are for reading; tests
// that stop or kill a router themselves (Stop, Drain, closing its
// connection) need not tell the deployment: routers that are closed or
// have lost their connection are skipped by the waits.
type Deployment struct {
	Server  *server.Server    // the one node; nil on a cluster
	Cluster *embedded.Cluster // nil on one node
	Routers []*router.Router  // every router started, in order
	// RouterConns[i] is the connection of Routers[i] (close it to kill the
	// router).
	RouterConns []*nats.Conn

	cfg     Config
	subj    bus.Subjects
	ownSrv  bool
	ownDir  bool
	mu      sync.Mutex
	conns   []*nats.Conn
	workers []*worker.Worker
	probes  []*nats.Conn // one per node, for EveryRouter
	next    int          // the node of the next connection
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
	d = &Deployment{cfg: cfg, subj: bus.NewSubjects(cfg.Router.Prefix), Server: cfg.Server}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	if d.Server == nil {
		if cfg.Dir == "" {
			if cfg.Dir, err = os.MkdirTemp("", "toolbus-xtest-*"); err != nil {
				return nil, fmt.Errorf("xtest: store dir: %w", err)
			}
			d.cfg.Dir, d.ownDir = cfg.Dir, true
		}
		d.ownSrv = true
		if cfg.Cluster {
			d.Cluster, err = embedded.StartCluster(embedded.ClusterConfig{Dir: cfg.Dir})
		} else {
			d.Server, err = embedded.Start(embedded.Config{StoreDir: cfg.Dir})
		}
		if err != nil {
			return nil, fmt.Errorf("xtest: %w", err)
		}
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

// Subjects are the deployment's subjects (Config.Router.Prefix).
func (d *Deployment) Subjects() bus.Subjects { return d.subj }

// Bound is the limit of every wait.
func (d *Deployment) Bound() time.Duration { return d.cfg.Bound }

// Heartbeat is the routers' and workers' heartbeat.
func (d *Deployment) Heartbeat() time.Duration { return d.cfg.Heartbeat }

// Nodes is the number of nats-server nodes.
func (d *Deployment) Nodes() int {
	if d.Cluster != nil {
		return d.Cluster.Nodes()
	}
	return 1
}

// URL is the client URL of node i; on a cluster it names every node,
// node i first.
func (d *Deployment) URL(i int) string {
	if d.Cluster != nil {
		return d.Cluster.URLs(i % d.Cluster.Nodes())
	}
	return d.Server.ClientURL()
}

// Replicas of the deployment's buckets and streams.
func (d *Deployment) Replicas() int {
	if d.Cluster != nil {
		return 3
	}
	return 1
}

func (d *Deployment) around(ctx context.Context, role string, fn func(context.Context)) {
	if d.cfg.Around == nil {
		fn(ctx)
		return
	}
	d.cfg.Around(ctx, role, fn)
}

// Connect opens a connection for role, closed by Close. On a cluster each
// connection starts on the next node, knows them all, and reconnects
// forever.
func (d *Deployment) Connect(ctx context.Context, role string) (*nats.Conn, error) {
	d.mu.Lock()
	n := d.next
	d.next++
	d.mu.Unlock()
	return d.connectNode(ctx, role, n)
}

func (d *Deployment) connectNode(ctx context.Context, role string, node int) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("toolbus-xtest-" + role)}
	if d.Cluster != nil {
		opts = append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	}
	opts = append(opts, d.cfg.Options...)
	var nc *nats.Conn
	var err error
	d.around(ctx, role, func(context.Context) { nc, err = nats.Connect(d.URL(node), opts...) })
	if err != nil {
		return nil, fmt.Errorf("xtest: connect %s: %w", role, err)
	}
	d.mu.Lock()
	d.conns = append(d.conns, nc)
	d.mu.Unlock()
	return nc, nil
}

// AddRouter starts one more router, with Config.Router, on its own
// connection.
func (d *Deployment) AddRouter(ctx context.Context) (*router.Router, error) {
	nc, err := d.Connect(ctx, RoleRouter)
	if err != nil {
		return nil, err
	}
	r, err := router.New(nc, d.cfg.Router)
	if err != nil {
		return nil, fmt.Errorf("xtest: router: %w", err)
	}
	d.around(ctx, RoleRouter, func(ctx context.Context) { err = r.Start(ctx) })
	if err != nil {
		return nil, fmt.Errorf("xtest: start router: %w", err)
	}
	d.mu.Lock()
	d.Routers = append(d.Routers, r)
	d.RouterConns = append(d.RouterConns, nc)
	d.mu.Unlock()
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
func (d *Deployment) AddWorker(ctx context.Context, spec WorkerSpec) (*worker.Worker, error) {
	nc := spec.Conn
	if nc == nil {
		var err error
		if nc, err = d.Connect(ctx, RoleWorker); err != nil {
			return nil, err
		}
	}
	if spec.Config.Heartbeat <= 0 {
		spec.Config.Heartbeat = d.cfg.Heartbeat
	}
	if spec.Config.Prefix == "" {
		spec.Config.Prefix = d.cfg.Router.Prefix
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
	d.around(ctx, RoleWorker, func(ctx context.Context) { err = w.Start(ctx) })
	if err != nil {
		return nil, fmt.Errorf("xtest: start worker: %w", err)
	}
	d.mu.Lock()
	d.workers = append(d.workers, w)
	d.mu.Unlock()
	t := time.NewTimer(d.cfg.Bound)
	defer t.Stop()
	select {
	case <-w.Registered():
		return w, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("xtest: worker %s not registered after %v", w.ID(), d.cfg.Bound)
	}
}

// serving returns the ids of the routers that still serve: neither closed
// nor cut off from the server.
func (d *Deployment) serving() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]bool{}
	for i, r := range d.Routers {
		select {
		case <-r.Closed():
			continue
		default:
		}
		if d.RouterConns[i].IsClosed() {
			continue
		}
		out[r.ID()] = true
	}
	return out
}

// probe returns the prober connection of node i.
func (d *Deployment) probe(ctx context.Context, i int) (*nats.Conn, error) {
	d.mu.Lock()
	if d.probes == nil {
		d.probes = make([]*nats.Conn, d.Nodes())
	}
	nc := d.probes[i]
	d.mu.Unlock()
	if nc != nil {
		return nc, nil
	}
	nc, err := d.connectNode(ctx, RoleClient, i)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.probes[i] = nc
	d.mu.Unlock()
	return nc, nil
}

// poll is how often the waits ask again.
const poll = 5 * time.Millisecond

// EveryRouter sends the request that msg builds (anything routers answer in
// queue group P-router: P.admin.<verb>, P.tools.<session>) again and again,
// from every node, until each router that serves has answered it with an
// event that check accepts; a router's answers are told apart by their
// source. An error event is handed to check like any other. It returns the
// last check error when the bound or ctx ends first. A router that is
// draining (unsubscribed, not closed yet) never answers: do not wait on one.
func (d *Deployment) EveryRouter(ctx context.Context, msg func() (*nats.Msg, error), check func(*bus.Event) error) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Bound)
	defer cancel()
	ok := map[string]bool{}
	var last error
	for {
		want := d.serving()
		done := true
		for id := range want {
			done = done && ok[id]
		}
		if done {
			return nil
		}
		for i := range d.Nodes() {
			if err := d.ask(ctx, i, msg, check, ok); err != nil && ctx.Err() == nil {
				last = err
			}
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			var missing []string
			for id := range d.serving() {
				if !ok[id] {
					missing = append(missing, id)
				}
			}
			slices.Sort(missing)
			return fmt.Errorf("xtest: routers %s: %w (last: %v)", strings.Join(missing, ", "), ctx.Err(), last)
		case <-t.C:
		}
	}
}

// ask sends one request from node i and records whether its router passed.
func (d *Deployment) ask(ctx context.Context, i int, msg func() (*nats.Msg, error), check func(*bus.Event) error, ok map[string]bool) error {
	nc, err := d.probe(ctx, i)
	if err != nil {
		return err
	}
	m, err := msg()
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		return err
	}
	e, err := bus.Decode(resp)
	if err != nil {
		return err
	}
	id := strings.TrimPrefix(e.Source, "toolbus/router/")
	if err := check(e); err != nil {
		ok[id] = false
		return fmt.Errorf("router %s: %w", id, err)
	}
	ok[id] = true
	return nil
}

// StatusMsg builds a P.admin.status request.
func (d *Deployment) StatusMsg() (*nats.Msg, error) {
	e, err := bus.NewEvent(bus.TypeAdmin, "toolbus/xtest", struct{}{})
	if err != nil {
		return nil, err
	}
	return e.Msg(d.subj.Admin("status"))
}

// EveryStatus is EveryRouter with P.admin.status: check gets each router's
// status.
func (d *Deployment) EveryStatus(ctx context.Context, check func(bus.Status) error) error {
	return d.EveryRouter(ctx, d.StatusMsg, func(e *bus.Event) error {
		if e.Type != bus.TypeAdminReply {
			return fmt.Errorf("status reply %s: %s", e.Type, e.Data)
		}
		var st bus.Status
		if err := e.DataAs(&st); err != nil {
			return err
		}
		return check(st)
	})
}

// live reports whether st shows tool registered and callable: external,
// or with at least one live worker.
func live(st bus.Status, tool string) bool {
	for _, t := range st.Tools {
		if t.Name == tool {
			return t.External || t.LiveWorkers > 0
		}
	}
	return false
}

// WaitLive waits until every router that serves reports each named tool
// live in its P.admin.status.
func (d *Deployment) WaitLive(ctx context.Context, names ...string) error {
	return d.EveryStatus(ctx, func(st bus.Status) error {
		for _, n := range names {
			if !live(st, n) {
				return fmt.Errorf("tool %s not live", n)
			}
		}
		return nil
	})
}

// WaitGone waits until no router that serves reports any named tool live.
func (d *Deployment) WaitGone(ctx context.Context, names ...string) error {
	return d.EveryStatus(ctx, func(st bus.Status) error {
		for _, n := range names {
			if live(st, n) {
				return fmt.Errorf("tool %s still live", n)
			}
		}
		return nil
	})
}

// waitServed waits, on a cluster, until a request sent on every node finds
// a router.
func (d *Deployment) waitServed(ctx context.Context) error {
	if d.Cluster == nil || len(d.Routers) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Bound)
	defer cancel()
	for i := range d.Nodes() {
		for {
			err := d.ask(ctx, i, d.StatusMsg, func(*bus.Event) error { return nil }, map[string]bool{})
			if err == nil {
				break
			}
			t := time.NewTimer(poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("xtest: no router answers on node %d: %w", i, errors.Join(ctx.Err(), err))
			case <-t.C:
			}
		}
	}
	return nil
}

// StopTimeout bounds how long Close waits for each worker and router to
// drain.
const StopTimeout = 10 * time.Second

// Close stops everything the deployment started, in reverse order: the
// workers, then the routers (each set draining at once), the connections,
// the servers, and the temporary store directory. It is safe to call
// after a test stopped some of them itself.
func (d *Deployment) Close() {
	d.mu.Lock()
	workers, routers, conns := d.workers, d.Routers, d.conns
	d.workers, d.conns, d.probes = nil, nil, nil
	d.mu.Unlock()
	drainAll(workers, func(w *worker.Worker, ctx context.Context) { _ = w.Drain(ctx) })
	drainAll(routers, func(r *router.Router, ctx context.Context) { _ = r.Drain(ctx) })
	for _, nc := range conns {
		nc.Close()
	}
	if d.ownSrv {
		if d.Cluster != nil {
			d.Cluster.Stop()
		}
		if d.Server != nil {
			d.Server.Shutdown()
			d.Server.WaitForShutdown()
		}
	}
	if d.ownDir {
		_ = os.RemoveAll(d.cfg.Dir)
	}
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
