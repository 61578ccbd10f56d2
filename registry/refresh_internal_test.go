package registry

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestRefreshSeesBeatAFollowerLacks: a router whose watch of P_workers and
// whose key listings are served by a follower that has not applied the
// worker's first beat yet (an ephemeral consumer of a replicated bucket
// may sit on any replica) must still find the worker live on Refresh,
// once another router acknowledged the registration (docs/protocol.md
// 5: a registration acknowledged through one router is seen by every
// router at once). TestOnCluster/RegistrationSeenAtOnceByEveryRouter
// failed 2 of 35 runs under load this way.
func TestRefreshSeesBeatAFollowerLacks(t *testing.T) {
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	st, err := store.Setup(t.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := func(r *Registry) *Registry {
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		testkit.Stop(t, r.Stop)
		return r
	}
	a := start(New(st, Config{Heartbeat: time.Second}))
	b := New(st, Config{Heartbeat: time.Second})
	b.liveness.kv = &laggingKV{KV: st.Workers}
	start(b)

	d := bus.ToolDef{Name: "fresh", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
	if ack, err := a.Register(t.Context(), Shared, "", bus.Register{Worker: "w1", Tools: []bus.ToolDef{d}}); err != nil || len(ack.Accepted) != 1 {
		t.Fatalf("register: %+v %v", ack, err)
	}
	refreshedLive(t, b, "fresh")
	// A tool whose workers left: a call finds none live (Refresh reads
	// KV); a new worker's registration acknowledged a moment later is
	// seen at once all the same, however recent that call's Refresh.
	again := d
	again.Name = "again"
	if ack, err := a.Register(t.Context(), Shared, "", bus.Register{Worker: "w1", Tools: []bus.ToolDef{again}}); err != nil || len(ack.Accepted) != 1 {
		t.Fatalf("register: %+v %v", ack, err)
	}
	if _, err := a.Register(t.Context(), Shared, "", bus.Register{Worker: "w1", Leaving: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(t.Context(), "again"); err != nil {
		t.Fatal(err)
	}
	if tool, ok := b.Lookup("again"); !ok || b.Live(tool) {
		t.Fatalf("after its only worker left, %q is known %v, live", "again", ok)
	}
	if ack, err := a.Register(t.Context(), Shared, "", bus.Register{Worker: "w2", Tools: []bus.ToolDef{again}}); err != nil || len(ack.Accepted) != 1 {
		t.Fatalf("register: %+v %v", ack, err)
	}
	refreshedLive(t, b, "again")
}

// refreshedLive fails t unless r finds a live worker of tool after Refresh.
func refreshedLive(t *testing.T, r *Registry, name string) {
	t.Helper()
	if err := r.Refresh(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	tool, ok := r.Lookup(name)
	if !ok {
		t.Fatal("the acknowledged tool is unknown after Refresh")
	}
	if !r.Live(tool) {
		t.Fatal("the acknowledged worker is not live after Refresh")
	}
}

// laggingKV is the workers bucket as a lagging follower serves it to
// consumers: its watch and key listings have not seen any beat yet. Reads
// of one key (Get, from the stream leader) and writes are the bucket's.
type laggingKV struct{ *store.KV }

func (l *laggingKV) Watch(ctx context.Context, _ string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return l.KV.Watch(ctx, "none-yet.>", opts...)
}

func (l *laggingKV) ListKeysFiltered(ctx context.Context, _ ...string) (jetstream.KeyLister, error) {
	return l.KV.ListKeysFiltered(ctx, "none-yet.*")
}

// TestRefreshAwaitsFirstBeatAfterStart: a router started while no worker
// of a tool has a beat stored (no router served their beats during an
// outage longer than the workers bucket's TTL) gives the workers its first
// two heartbeats to beat before it answers the tool unavailable; a later
// Refresh answers at once. test/embedded TestClusterRouterSIGKILL failed
// this way under load: the re-sent calls of the router started in the
// killed one's place were answered unavailable.
func TestRefreshAwaitsFirstBeatAfterStart(t *testing.T) {
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	const beat = 2 * time.Second
	st, err := store.Setup(t.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: beat})
	if err != nil {
		t.Fatal(err)
	}
	a := New(st, Config{Heartbeat: beat})
	d := bus.ToolDef{Name: "slow", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
	if ack, err := a.Register(t.Context(), Shared, "", bus.Register{Worker: "w1", Tools: []bus.ToolDef{d}}); err != nil || len(ack.Accepted) != 1 {
		t.Fatalf("register: %+v %v", ack, err)
	}
	if _, err := a.Register(t.Context(), Shared, "", bus.Register{Worker: "w1", Leaving: true}); err != nil {
		t.Fatal(err)
	}
	b := New(st, Config{Heartbeat: beat})
	probed := &probedKV{KV: st.Workers, read: make(chan struct{})}
	b.liveness.kv = probed
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, b.Stop)
	registered := make(chan error, 1)
	go func() {
		<-probed.read // the worker beats once Refresh found none in KV
		_, err := a.Register(context.WithoutCancel(t.Context()), Shared, "", bus.Register{Worker: "w2", Tools: []bus.ToolDef{d}})
		registered <- err
	}()
	refreshedLive(t, b, "slow")
	if err := <-registered; err != nil {
		t.Fatal(err)
	}
}

// probedKV is the workers bucket that says when Refresh's probe read it.
type probedKV struct {
	*store.KV
	read chan struct{}
	once sync.Once
}

func (p *probedKV) Latest(ctx context.Context, filter string) ([]jetstream.KeyValueEntry, error) {
	defer p.once.Do(func() { close(p.read) })
	return p.KV.Latest(ctx, filter)
}
