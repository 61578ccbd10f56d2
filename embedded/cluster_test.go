package embedded_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
)

func TestClusterReplicatesAndSurvivesANode(t *testing.T) {
	c, err := embedded.StartCluster(testkit.Within(t, embedded.ClusterReady), embedded.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, c.Stop)
	nc, err := nats.Connect(c.URLs(0), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js := testkit.JetStream(t, nc)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "b", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	leader, err := c.WaitStreamLeader(testkit.Within(t, bound), "KV_b")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(testkit.Within(t, 3*bound)); err != nil {
		t.Fatal(err)
	}
	c.StopNode(leader)
	if c.Node(leader) != nil {
		t.Fatal("stopped node still listed")
	}
	// The waits take a ctx (the one lifecycle shape, docs/router.md): a
	// cancelled one ends them at once, its error wrapped.
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.WaitHealthy(gone); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("healthy with a node stopped: %v", err)
	}
	if _, err := c.WaitStreamLeader(gone, "KV_nothing"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a stream that does not exist has a leader: %v", err)
	}
	next, err := c.WaitStreamLeader(testkit.Within(t, 3*bound), "KV_b")
	if err != nil || next == leader {
		t.Fatalf("no new leader: %d %v", next, err)
	}
	if err := c.Start(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(leader); err == nil {
		t.Fatal("a running node started twice")
	}
	if err := c.WaitReady(testkit.Within(t, 3*bound)); err != nil {
		t.Fatal(err)
	}
	// Healthy once the restarted node has caught up with the stream it
	// holds a replica of (nats-server's /healthz).
	if err := c.WaitHealthy(testkit.Within(t, 3*bound)); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), "k")
	if err != nil || string(e.Value()) != "1" {
		t.Fatalf("after a restart: %v %v", e, err)
	}
	if _, err := embedded.StartCluster(testkit.Within(t, embedded.ClusterReady), embedded.ClusterConfig{}); err == nil {
		t.Fatal("a cluster without a store directory started")
	}
}

// TestWaitStreamLeaderInAnAccount: on a secured cluster (the generated
// accounts, as `router --secure` writes them) a stream lives in the main
// account, not the global one; its leader is found there, and a new one
// after the leader's node stops.
func TestWaitStreamLeaderInAnAccount(t *testing.T) {
	dir := t.TempDir()
	secure := filepath.Join(dir, "secure")
	users, err := security.Generate(secure, "", security.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := embedded.StartCluster(testkit.Within(t, embedded.ClusterReady), embedded.ClusterConfig{Dir: filepath.Join(dir, "js"), ConfigFile: filepath.Join(secure, security.ServerConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, c.Stop)
	nc, err := natsconn.Config{URLs: c.URLs(0), NKey: security.SeedFile(secure, security.RoleRouter), InboxPrefix: security.RouterInbox}.Connect("test", nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := testkit.JetStream(t, nc).CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "b", Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	leader, err := c.WaitStreamLeader(testkit.Within(t, bound), "KV_b")
	if err != nil {
		t.Fatal(err)
	}
	if router, _ := security.Lookup(users, security.RoleRouter); !c.Node(leader).JetStreamIsStreamLeader(router.Account, "KV_b") {
		t.Fatalf("node %d does not lead KV_b in the main account", leader)
	}
	c.StopNode(leader)
	if next, err := c.WaitStreamLeader(testkit.Within(t, 3*bound), "KV_b"); err != nil || next == leader {
		t.Fatalf("no new leader: %d %v", next, err)
	}
}

// TestStartClusterEndsWithItsCtx: StartCluster waits for a meta leader
// only until its ctx ends, its error wrapping the ctx's, and starts nothing
// once the ctx has ended (session 41: it took a timeout of its own).
func TestStartClusterEndsWithItsCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if c, err := embedded.StartCluster(ctx, embedded.ClusterConfig{Dir: t.TempDir()}); !errors.Is(err, context.Canceled) || c != nil {
		t.Fatalf("a cluster started with an ended ctx: %v %v", c, err)
	}
}
