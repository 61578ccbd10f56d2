// Package xtest starts a whole deployment in process (nats-server or a
// 3-node cluster, routers, workers) for integration tests and the bench,
// and sees readiness through the protocol only. Methods return errors for
// the bench; tests use Run.
package xtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// Roles name the part of a deployment a connection serves (Config.Around).
const (
	RoleRouter = "router"
	RoleWorker = "worker"
	RoleClient = "client"
)

// Defaults: a heartbeat after which a worker that left is soon gone, and a
// bound generous enough for a busy two-core machine under -race.
const (
	DefaultHeartbeat = 500 * time.Millisecond
	DefaultBound     = 10 * time.Second
)

// Config describes a deployment. The zero value is one nats-server node and
// no router.
type Config struct {
	// Cluster starts a 3-node cluster and replicates everything three times.
	Cluster bool
	// Server, when set, is a running nats-server to deploy on; Close leaves
	// it running.
	Server *server.Server
	// Dir holds the servers' stores; "" means a temporary directory that
	// Close removes.
	Dir string
	// Routers is how many routers Start starts.
	Routers int
	// Router is the configuration of every router (each its own copy);
	// Store.Heartbeat defaults to Heartbeat.
	Router router.Config
	// Heartbeat of the routers and the workers; zero means DefaultHeartbeat.
	Heartbeat time.Duration
	// Bound limits every wait on top of the caller's context; zero means DefaultBound.
	Bound time.Duration
	// Options are added to every connection the deployment opens.
	Options []nats.Option
	// Around, when set, runs every connect and Start, so that the
	// goroutines they spawn inherit what it sets up (the bench's labels).
	Around func(ctx context.Context, role string, fn func(context.Context))
}

// Deployment embeds its Net, Fleet and Readiness; fields are for reading.
// Routers a test stops itself are skipped by the waits.
type Deployment struct {
	*Net
	*Fleet
	*Readiness
}

// TB is what Run needs of a testing.TB, so that the bench's binary, which
// calls Start, does not link package testing.
type TB interface {
	Helper()
	TempDir() string
	Context() context.Context
	Fatal(args ...any)
	Cleanup(func())
}

// Run is Start for a test: it fails t on error and closes the deployment
// when t ends. Dir defaults to t.TempDir().
func Run(t TB, cfg Config) *Deployment {
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
// node of a cluster sees a router's subscriptions.
func Start(ctx context.Context, cfg Config) (d *Deployment, err error) {
	cfg = cfg.withDefaults()
	net := &Net{Server: cfg.Server, opts: cfg.Options, wrap: cfg.Around, dir: cfg.Dir}
	fleet := &Fleet{net: net, router: cfg.Router, subj: bus.NewSubjects(cfg.Router.Prefix),
		heartbeat: cfg.Heartbeat, bound: cfg.Bound}
	started := &Deployment{Net: net, Fleet: fleet,
		Readiness: &Readiness{net: net, fleet: fleet, subj: fleet.subj, bound: cfg.Bound}}
	defer func() {
		if err != nil { // a return has set d to nil already
			started.Close()
		}
	}()
	if err := started.Net.start(ctx, cfg.Cluster); err != nil {
		return nil, err
	}
	for range cfg.Routers {
		if _, err := started.AddRouter(ctx); err != nil {
			return nil, err
		}
	}
	if err := started.waitServed(ctx); err != nil {
		return nil, err
	}
	return started, nil
}

// withDefaults returns cfg with its defaults set.
func (cfg Config) withDefaults() Config {
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, DefaultHeartbeat)
	cfg.Bound = cmp.Or(cfg.Bound, DefaultBound)
	cfg.Router.Store.Heartbeat = cmp.Or(cfg.Router.Store.Heartbeat, cfg.Heartbeat)
	if cfg.Cluster {
		cfg.Router.Store.Replicas = 3
	}
	return cfg
}

// StopTimeout bounds how long Close waits for each worker and router to
// drain.
const StopTimeout = 10 * time.Second

// Close stops everything the deployment started, in reverse order.
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
// it started, each on a connection of the Net; its fields are for reading.
type Fleet struct {
	Routers     []*router.Router // every router started, in order
	RouterConns []*nats.Conn     // RouterConns[i] is Routers[i]'s (close it to kill the router)

	net       *Net
	router    router.Config // Config.Router, defaults applied
	subj      bus.Subjects
	heartbeat time.Duration
	bound     time.Duration

	mu      sync.Mutex // Routers, RouterConns, workers
	workers []*worker.Worker
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
// registration (WaitLive waits for every router); Close drains it.
func (f *Fleet) AddWorker(ctx context.Context, spec WorkerSpec) (*worker.Worker, error) {
	nc := spec.Conn
	if nc == nil {
		var err error
		if nc, err = f.net.Connect(ctx, RoleWorker); err != nil {
			return nil, err
		}
	}
	spec.Config.Heartbeat = cmp.Or(spec.Config.Heartbeat, f.heartbeat)
	spec.Config.Prefix = cmp.Or(spec.Config.Prefix, f.router.Prefix)
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
	ctx, cancel := context.WithTimeout(ctx, f.bound)
	defer cancel()
	select {
	case <-w.Registered():
		return w, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("xtest: worker %s not registered within %v: %w", w.ID(), f.bound, ctx.Err())
	}
}

// serving returns the ids of the routers neither closed nor cut off.
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

// take returns the workers and the routers and forgets the workers.
func (f *Fleet) take() ([]*worker.Worker, []*router.Router) {
	f.mu.Lock()
	defer f.mu.Unlock()
	workers := f.workers
	f.workers = nil
	return workers, f.Routers
}

// Net is the NATS side of a deployment: its nats-server (one node or a
// cluster), its store directory, and every connection it opens; its
// fields are for reading.
type Net struct {
	Server  *server.Server    // the one node; nil on a cluster
	Cluster *embedded.Cluster // nil on one node

	opts   []nats.Option // Config.Options
	wrap   func(ctx context.Context, role string, fn func(context.Context))
	dir    string // the servers' stores
	ownSrv bool   // started here: Close stops it
	ownDir bool   // made here: Close removes it

	mu    sync.Mutex
	conns []*nats.Conn
	next  int // the node of the next connection
}

// start starts the servers, unless Config.Server gave one.
func (n *Net) start(ctx context.Context, cluster bool) error {
	if n.Server != nil {
		return nil
	}
	if n.dir == "" {
		dir, err := os.MkdirTemp("", "toolbus-xtest-*")
		if err != nil {
			return fmt.Errorf("xtest: store dir: %w", err)
		}
		n.dir, n.ownDir = dir, true
	}
	n.ownSrv = true
	var err error
	if cluster {
		ready, cancel := context.WithTimeout(ctx, embedded.ClusterReady)
		n.Cluster, err = embedded.StartCluster(ready, embedded.ClusterConfig{MaxStore: embedded.Roomy, Dir: n.dir})
		cancel()
	} else {
		n.Server, err = embedded.Start(embedded.Config{MaxStore: embedded.Roomy, StoreDir: n.dir})
	}
	if err != nil {
		return fmt.Errorf("xtest: %w", err)
	}
	return nil
}

// Nodes is the number of nats-server nodes.
func (n *Net) Nodes() int {
	if n.Cluster != nil {
		return n.Cluster.Nodes()
	}
	return 1
}

// URL is the client URL of node i; on a cluster it names every node,
// node i first.
func (n *Net) URL(i int) string {
	if n.Cluster != nil {
		return n.Cluster.URLs(i % n.Cluster.Nodes())
	}
	return n.Server.ClientURL()
}

// Replicas of the deployment's buckets and streams.
func (n *Net) Replicas() int {
	if n.Cluster != nil {
		return 3
	}
	return 1
}

// around runs fn through Config.Around, if set.
func (n *Net) around(ctx context.Context, role string, fn func(context.Context)) {
	if n.wrap == nil {
		fn(ctx)
		return
	}
	n.wrap(ctx, role, fn)
}

// Connect opens a connection for role, closed by Close; on a cluster, on
// the next node, knowing them all, reconnecting forever.
func (n *Net) Connect(ctx context.Context, role string) (*nats.Conn, error) {
	n.mu.Lock()
	node := n.next
	n.next++
	n.mu.Unlock()
	return n.connectNode(ctx, role, node)
}

// connectTimeout bounds a connection's handshake: nats.go's 2 s is too short
// under -race on a loaded machine (TestWorkerVanishesMidCall).
const connectTimeout = 30 * time.Second

func (n *Net) connectNode(ctx context.Context, role string, node int) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("toolbus-xtest-" + role), nats.Timeout(connectTimeout)}
	if n.Cluster != nil {
		opts = append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	}
	opts = append(opts, n.opts...)
	var nc *nats.Conn
	var err error
	n.around(ctx, role, func(context.Context) { nc, err = nats.Connect(n.URL(node), opts...) })
	if err != nil {
		return nil, fmt.Errorf("xtest: connect %s: %w", role, err)
	}
	n.mu.Lock()
	n.conns = append(n.conns, nc)
	n.mu.Unlock()
	return nc, nil
}

// take returns the connections opened so far and forgets them.
func (n *Net) take() []*nats.Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	conns := n.conns
	n.conns = nil
	return conns
}

// shutdown closes conns, then stops the servers and the store made here.
func (n *Net) shutdown(conns []*nats.Conn) {
	for _, nc := range conns {
		nc.Close()
	}
	if n.ownSrv {
		if n.Cluster != nil {
			_ = n.Cluster.Stop(context.Background()) // a test kit: no caller context here
		}
		if n.Server != nil {
			n.Server.Shutdown()
			n.Server.WaitForShutdown()
		}
	}
	if n.ownDir {
		_ = os.RemoveAll(n.dir)
	}
}

// Readiness waits through the protocol only, asking from every node until
// each serving router gives the answer wanted.
type Readiness struct {
	net   *Net
	fleet *Fleet
	subj  bus.Subjects
	bound time.Duration

	mu     sync.Mutex
	probes []*nats.Conn // one per node, for EveryRouter
}

// probe returns the prober connection of node i.
func (r *Readiness) probe(ctx context.Context, i int) (nc *nats.Conn, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probes == nil {
		r.probes = make([]*nats.Conn, r.net.Nodes())
	}
	if r.probes[i] == nil {
		r.probes[i], err = r.net.connectNode(ctx, RoleClient, i)
	}
	return r.probes[i], err
}

// forget drops the prober connections (Close closes them with the rest).
func (r *Readiness) forget() {
	r.mu.Lock()
	r.probes = nil
	r.mu.Unlock()
}

// poll is how often the waits ask again.
const poll = 5 * time.Millisecond

// EveryRouter sends msg's request from every node until each serving router
// answered with an event check accepts, else the last check error (a
// draining router never answers).
func (r *Readiness) EveryRouter(ctx context.Context, msg func() (*nats.Msg, error), check func(*bus.Event) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.bound)
	defer cancel()
	ok := map[string]bool{}
	var last error
	for {
		var missing []string
		for id := range r.fleet.serving() {
			if !ok[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			slices.Sort(missing)
			return fmt.Errorf("xtest: routers %s: %w (last: %v)", strings.Join(missing, ", "), ctx.Err(), last)
		}
		for i := range r.net.Nodes() {
			if err := r.ask(ctx, i, msg, check, ok); err != nil && ctx.Err() == nil {
				last = err
			}
		}
		_ = bus.Sleep(ctx, poll)
	}
}

// ask sends one request from node i and records whether its router passed.
func (r *Readiness) ask(ctx context.Context, i int, msg func() (*nats.Msg, error), check func(*bus.Event) error, ok map[string]bool) error {
	nc, err := r.probe(ctx, i)
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
func (r *Readiness) StatusMsg() (*nats.Msg, error) {
	e, err := bus.NewEvent(bus.TypeAdmin, "toolbus/xtest", struct{}{})
	if err != nil {
		return nil, err
	}
	return e.Msg(r.subj.Admin("status"))
}

// EveryStatus is EveryRouter with P.admin.status: check gets each router's
// status.
func (r *Readiness) EveryStatus(ctx context.Context, check func(bus.Status) error) error {
	return r.EveryRouter(ctx, r.StatusMsg, func(e *bus.Event) error {
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

// WaitLive waits until every router that serves reports each named tool
// live in its P.admin.status.
func (r *Readiness) WaitLive(ctx context.Context, names ...string) error {
	return r.EveryStatus(ctx, func(st bus.Status) error { return st.CheckLive(names...) })
}

// WaitGone waits until no router that serves reports any named tool live.
func (r *Readiness) WaitGone(ctx context.Context, names ...string) error {
	return r.EveryStatus(ctx, func(st bus.Status) error {
		for _, n := range names {
			if st.Live(n) {
				return fmt.Errorf("tool %s still live", n)
			}
		}
		return nil
	})
}

// waitServed waits, on a cluster, until a request on every node finds a router.
func (r *Readiness) waitServed(ctx context.Context) error {
	if r.net.Cluster == nil || len(r.fleet.serving()) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.bound)
	defer cancel()
	for i := range r.net.Nodes() {
		for {
			err := r.ask(ctx, i, r.StatusMsg, func(*bus.Event) error { return nil }, map[string]bool{})
			if err == nil {
				break
			}
			if bus.Sleep(ctx, poll) != nil {
				return fmt.Errorf("xtest: no router answers on node %d: %w", i, errors.Join(ctx.Err(), err))
			}
		}
	}
	return nil
}
