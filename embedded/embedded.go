// Package embedded starts nats-server with JetStream in this process: one
// node, or a loopback cluster whose nodes can be stopped and restarted.
package embedded

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures an in-process nats-server with JetStream.
type Config struct {
	// Listen is host:port to listen on; "" means 127.0.0.1 on a random port.
	Listen string
	// StoreDir is the JetStream store directory; "" means a temporary one
	// chosen by the server.
	StoreDir string
	// ConfigFile is a nats-server configuration applied before Listen and StoreDir.
	ConfigFile string
	// ReadyTimeout bounds the wait for the server to accept connections;
	// zero means 10 s.
	ReadyTimeout time.Duration
	// MaxStore is JetStream's disk limit in bytes; zero means
	// nats-server's, 75% of the disk free at the start.
	MaxStore int64
}

// Roomy is a MaxStore for tests, the bench and the soak: they reserve
// every stream's byte bound on each server (about 4 GiB a deployment) but
// write little, so the default refused them on a nearly full disk.
const Roomy int64 = 1 << 40

// Start starts a nats-server with JetStream in this process and waits
// until it accepts connections. Callers stop it with Shutdown and
// WaitForShutdown.
func Start(cfg Config) (*server.Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		o, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("embedded: nats config %s: %w", cfg.ConfigFile, err)
		}
		opts = o
	}
	opts.JetStream, opts.NoSigs = true, true
	opts.StoreDir = cmp.Or(cfg.StoreDir, opts.StoreDir)
	opts.JetStreamMaxStore = cmp.Or(cfg.MaxStore, opts.JetStreamMaxStore)
	host, port := "127.0.0.1", -1
	if cfg.Listen != "" {
		h, p, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded: listen address %q: %w", cfg.Listen, err)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("embedded: listen port %q: %w", p, err)
		}
		host, port = cmp.Or(h, host), n
	}
	// A configuration file that names no port listens where Listen says
	// (by default 127.0.0.1 on a random port), not on nats-server's 4222.
	if cfg.ConfigFile == "" || cfg.Listen != "" || opts.Port == 0 {
		opts.Host, opts.Port = host, port
	}
	if opts.Port > 0 {
		// Say plainly when the port is taken, rather than "not ready".
		addr := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("embedded: cannot listen on %[1]s (is another router or nats-server running there? "+
				"join it with --nats nats://%[1]s, or pick another --listen): %[2]w", addr, err)
		}
		_ = ln.Close()
	}
	s, err := serve(opts, cmp.Or(max(cfg.ReadyTimeout, 0), 10*time.Second), "nats-server")
	if err != nil || len(opts.Accounts) == 0 {
		return s, err
	}
	switch moved, err := adoptGlobal(s, opts); {
	case err != nil: // s is shut down
		return nil, err
	case moved:
		return Start(cfg) // on the store as the named account now finds it
	}
	return s, nil
}

// adoptGlobal gives the global account's JetStream store to the one
// configured account with JetStream, when the global account has none and
// that account no streams yet: a secured deployment before session 29 kept
// every login, so its data, in the global account (docs/operations.md). It
// shuts s down to move the store and reports whether it did.
func adoptGlobal(s *server.Server, opts *server.Options) (bool, error) {
	var named []string
	for _, a := range opts.Accounts {
		if acc, err := s.LookupAccount(a.Name); err == nil && acc.JetStreamEnabled() {
			named = append(named, a.Name)
		}
	}
	if len(named) != 1 || s.GlobalAccount().JetStreamEnabled() {
		return false, nil
	}
	root := s.JetStreamConfig().StoreDir
	global, to := filepath.Join(root, server.DEFAULT_GLOBAL_ACCOUNT), filepath.Join(root, named[0])
	if old, _ := os.ReadDir(filepath.Join(global, "streams")); len(old) == 0 {
		return false, nil
	}
	if cur, _ := os.ReadDir(filepath.Join(to, "streams")); len(cur) > 0 {
		return false, nil
	}
	s.Shutdown()
	s.WaitForShutdown()
	err := os.RemoveAll(to)
	if err == nil {
		err = os.Rename(global, to)
	}
	if err != nil {
		return false, fmt.Errorf("embedded: give the global account's store to %s: %w", named[0], err)
	}
	return true, nil
}

// serve starts a server of opts (whose messages may be 8 MiB) and waits
// until it accepts connections; what names it in errors.
func serve(opts *server.Options, wait time.Duration, what string) (*server.Server, error) {
	opts.MaxPayload = 8 << 20
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: %s: %w", what, err)
	}
	go s.Start()
	if !s.ReadyForConnections(wait) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded: %s did not become ready", what)
	}
	return s, nil
}

// ClusterConfig configures a nats-server cluster in this process.
type ClusterConfig struct {
	// Dir holds each node's JetStream store (Dir/n0, Dir/n1, ...); it is
	// required, so a restarted node finds its data again.
	Dir string
	// Name is the cluster's name; "" means "toolbus".
	Name string
	// ConfigFile is a nats-server configuration (accounts, users) every
	// node applies before its ports, store and routes.
	ConfigFile string
	// MaxStore is each node's JetStream disk limit (Config.MaxStore).
	MaxStore int64
}

// clusterNodes is the size of a cluster.
const clusterNodes = 3

// ClusterReady is what a caller of StartCluster gives a cluster to elect a
// JetStream meta leader: 30 s, on a loaded machine too.
const ClusterReady = 30 * time.Second

// Cluster is a JetStream cluster on loopback ports whose nodes restart on
// the same ports and stores. Safe for concurrent use.
type Cluster struct {
	cfg     ClusterConfig
	mu      sync.Mutex
	nodes   []*server.Server // nil while stopped
	clients []int            // client port of each node
	routes  []int            // cluster port of each node
}

// StartCluster starts clusterNodes servers that route to each other and waits
// until JetStream has a meta leader, or ctx ends (an error wrapping its, the
// nodes stopped; ClusterReady bounds it). Stop ends them all.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	cfg.Name = cmp.Or(cfg.Name, "toolbus")
	if cfg.Dir == "" {
		return nil, errors.New("embedded: a cluster needs a store directory")
	}
	// A free port may be taken before a node listens: start again elsewhere.
	var err error
	dir := cfg.Dir
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		var c *Cluster
		if try > 0 { // a fresh store: the failed one knows other peers
			cfg.Dir = filepath.Join(dir, fmt.Sprintf("retry%d", try))
		}
		if c, err = startCluster(ctx, cfg); err == nil {
			return c, nil
		}
	}
	return nil, cmp.Or(err, fmt.Errorf("embedded: cluster not started: %w", ctx.Err()))
}

func startCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	c := &Cluster{cfg: cfg, nodes: make([]*server.Server, clusterNodes)}
	ports, err := freePorts(2 * clusterNodes)
	if err != nil {
		return nil, err
	}
	c.clients, c.routes = ports[:clusterNodes], ports[clusterNodes:]
	for i := range clusterNodes {
		if err := c.Start(i); err != nil {
			c.stopNodes()
			return nil, err
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		c.stopNodes()
		return nil, err
	}
	return c, nil
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("embedded: no free port: %w", err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	return ports, nil
}

// Start starts node i, which must be stopped (or never started), on its
// ports and store.
func (c *Cluster) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] != nil {
		return fmt.Errorf("embedded: node %d is running", i)
	}
	var routes []*url.URL
	for j, p := range c.routes {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
		}
	}
	opts := &server.Options{}
	if c.cfg.ConfigFile != "" {
		o, err := server.ProcessConfigFile(c.cfg.ConfigFile)
		if err != nil {
			return fmt.Errorf("embedded: nats config %s: %w", c.cfg.ConfigFile, err)
		}
		opts = o
	}
	opts.ServerName, opts.Host, opts.Port, opts.JetStream, opts.NoSigs = fmt.Sprintf("n%d", i), "127.0.0.1", c.clients[i], true, true
	opts.StoreDir = filepath.Join(c.cfg.Dir, fmt.Sprintf("n%d", i))
	opts.JetStreamMaxStore = cmp.Or(c.cfg.MaxStore, opts.JetStreamMaxStore)
	opts.Cluster, opts.Routes = server.ClusterOpts{Name: c.cfg.Name, Host: "127.0.0.1", Port: c.routes[i]}, routes
	s, err := serve(opts, 20*time.Second, fmt.Sprintf("node %d", i))
	c.nodes[i] = s
	return err
}

// Stop ends every node, waiting until ctx ends (then its error); safe twice.
func (c *Cluster) Stop(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.stopNodes()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("embedded: stop: %w", ctx.Err())
	}
}

func (c *Cluster) stopNodes() {
	for i := range clusterNodes {
		c.StopNode(i)
	}
}

// StopNode shuts node i down, as a crash of its machine would look to the
// others (its store stays, for Start).
func (c *Cluster) StopNode(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Node returns node i, nil while it is stopped.
func (c *Cluster) Node(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Nodes returns how many nodes the cluster has.
func (c *Cluster) Nodes() int { return clusterNodes }

// URL returns the client URL of node i.
func (c *Cluster) URL(i int) string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.clients[i]))
}

// URLs returns every node's client URL, node first first, joined with
// commas as nats.Connect takes them.
func (c *Cluster) URLs(first int) string {
	urls := make([]string, 0, clusterNodes)
	for k := range clusterNodes {
		urls = append(urls, c.URL((first+k)%clusterNodes))
	}
	return strings.Join(urls, ",")
}

// WaitReady waits until a meta leader counts every running node as a
// peer, or ctx ends (an error wrapping its).
func (c *Cluster) WaitReady(ctx context.Context) error {
	if !waitFor(ctx, c.ready) {
		return fmt.Errorf("embedded: cluster has no JetStream meta leader: %w", ctx.Err())
	}
	return nil
}

func (c *Cluster) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	running, peers, current := 0, 0, true
	for _, s := range c.nodes {
		if s == nil {
			continue
		}
		running++
		if s.JetStreamIsLeader() {
			peers = len(s.JetStreamClusterPeers())
		}
		current = current && s.JetStreamIsCurrent()
	}
	return peers == running && current
}

// WaitHealthy waits until every node runs and is healthy as /healthz says
// (every replica current), as a rolling restart must between nodes, or
// ctx ends: the error then names what was not healthy last and wraps ctx's.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var why string
	if !waitFor(ctx, func() bool { why = c.unhealthy(); return why == "" }) {
		return fmt.Errorf("embedded: cluster not healthy: %s: %w", why, ctx.Err())
	}
	return nil
}

// unhealthy says why the cluster is not whole, or "" when it is.
func (c *Cluster) unhealthy() string {
	c.mu.Lock()
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()
	// A stopped node first: the others' health then only echoes it.
	if i := slices.Index(nodes, nil); i >= 0 {
		return fmt.Sprintf("node %d is stopped", i)
	}
	for i, s := range nodes {
		if h := s.Healthz(nil); h.Status != "ok" || h.Error != "" {
			return fmt.Sprintf("node %d: %s", i, cmp.Or(h.Error, h.Status))
		}
	}
	if !c.ready() {
		return "JetStream's meta group does not count every node as a current peer"
	}
	return ""
}

// waitFor polls ok every 20 ms until it holds (true) or ctx ends.
func waitFor(ctx context.Context, ok func() bool) bool {
	for !ok() {
		select {
		case <-ctx.Done():
			return ok()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// WaitStreamLeader waits until stream, in whichever account holds it (the
// global one, or a configured account with JetStream), has a leader and
// returns its node; -1 and an error wrapping ctx's once ctx ends.
func (c *Cluster) WaitStreamLeader(ctx context.Context, stream string) (int, error) {
	leader := -1
	if !waitFor(ctx, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		leader = slices.IndexFunc(c.nodes, func(s *server.Server) bool {
			if s == nil {
				return false
			}
			accounts, _ := s.Accountz(nil) // every account's name: no error
			return slices.ContainsFunc(accounts.Accounts, func(a string) bool { return s.JetStreamIsStreamLeader(a, stream) })
		})
		return leader >= 0
	}) {
		return -1, fmt.Errorf("embedded: stream %s has no leader: %w", stream, ctx.Err())
	}
	return leader, nil
}
