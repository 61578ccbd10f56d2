package xtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/embedded"
)

// Net is the NATS side of a deployment: its nats-server (one node or a
// cluster), its store directory, and every connection it opens. A
// Deployment embeds it; its fields are for reading.
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

func newNet(cfg Config) *Net {
	return &Net{Server: cfg.Server, opts: cfg.Options, wrap: cfg.Around, dir: cfg.Dir}
}

// start starts the servers, unless Config.Server gave one; a "" dir
// becomes a temporary directory that shutdown removes.
func (n *Net) start(cluster bool) error {
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
		n.Cluster, err = embedded.StartCluster(embedded.ClusterConfig{Dir: n.dir})
	} else {
		n.Server, err = embedded.Start(embedded.Config{StoreDir: n.dir})
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

// Connect opens a connection for role, closed by Close. On a cluster each
// connection starts on the next node, knows them all, and reconnects
// forever.
func (n *Net) Connect(ctx context.Context, role string) (*nats.Conn, error) {
	n.mu.Lock()
	node := n.next
	n.next++
	n.mu.Unlock()
	return n.connectNode(ctx, role, node)
}

// connectTimeout bounds a connection's dial and handshake (INFO, CONNECT,
// PING/PONG with the in-process server). nats.go's default, 2 s, is too
// short for a race-built test process and server on a loaded 2-core
// machine: "connect: read tcp ...: i/o timeout" (TestWorkerVanishesMidCall).
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

// shutdown closes conns, then stops the servers and removes the store
// directory if they were made here.
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
