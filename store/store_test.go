package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

func TestSetupIdempotent(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	js := testkit.JetStream(t, nc)
	subj := bus.NewSubjects("tb")
	for range 2 {
		st, err := store.Setup(t.Context(), js, subj, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Sessions.Bucket() != "tb_sessions" {
			t.Fatalf("bucket %s", st.Sessions.Bucket())
		}
	}
	if _, err := js.Stream(t.Context(), "TB_EVENTS"); err != nil {
		t.Fatal(err)
	}
	// The parked records are the handoff (docs/protocol.md 6.2, 1.6): no
	// stream of requests.
	if _, err := js.Stream(t.Context(), "TB_HANDOFF"); err == nil {
		t.Fatal("a handoff stream was made")
	}
}

func TestSetupConfig(t *testing.T) {
	s, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js := testkit.JetStream(t, nc)
	cfg := store.Config{Heartbeat: 2 * time.Second, DedupeWindow: time.Minute, SessionTTL: time.Hour,
		EventsMaxAge: 2 * time.Hour, HandoffMaxAge: 3 * time.Hour, Memory: true}
	st, err := store.Setup(t.Context(), js, bus.NewSubjects("dep"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kv  jetstream.KeyValue
		ttl time.Duration
	}{
		{st.Tools, 0}, {st.Workers, 6 * time.Second}, {st.Groups, 0}, {st.Sessions, time.Hour},
		{st.Parked, 3 * time.Hour}, {st.Ledger, time.Minute},
	} {
		status, err := tc.kv.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(status.Bucket(), "dep_") || status.TTL() != tc.ttl {
			t.Errorf("bucket %s TTL %v, want %v", status.Bucket(), status.TTL(), tc.ttl)
		}
		if info := status.(*jetstream.KeyValueBucketStatus).StreamInfo(); info.Config.Storage != jetstream.MemoryStorage {
			t.Errorf("bucket %s on %v", status.Bucket(), info.Config.Storage)
		}
	}
	for _, tc := range []struct {
		stream   jetstream.Stream
		name     string
		subjects []string
		maxAge   time.Duration
	}{
		{st.Events, "DEP_EVENTS", []string{"dep.events.>"}, 2 * time.Hour},
		{st.ParkedStream, "KV_dep_parked", []string{"$KV.dep_parked.>"}, 3 * time.Hour},
	} {
		info, err := tc.stream.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Name != tc.name || strings.Join(info.Config.Subjects, ",") != strings.Join(tc.subjects, ",") || info.Config.MaxAge != tc.maxAge {
			t.Errorf("stream %+v", info.Config)
		}
	}
	// The events stream stores an event sent again under its id once
	// within the dedupe window (docs/protocol.md 3.4; it was nats-server's
	// two minutes before 1.21), bounded by the events' age.
	for _, tc := range []struct {
		cfg  store.Config
		want time.Duration
	}{
		{store.Config{Memory: true}, bus.DefaultDedupeWindow},
		{cfg, time.Minute},
		{store.Config{Memory: true, DedupeWindow: time.Hour, EventsMaxAge: 30 * time.Minute}, 30 * time.Minute},
	} {
		st, err := store.Setup(t.Context(), js, bus.NewSubjects("dup"), tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := st.Events.Info(t.Context()); err != nil || info.Config.Duplicates != tc.want {
			t.Errorf("events stream's duplicates window %v (%v), want %v", info.Config.Duplicates, err, tc.want)
		}
	}
	// Defaults.
	def, err := store.Setup(t.Context(), js, bus.NewSubjects("dflt"), store.Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := def.Workers.Status(t.Context()); status.TTL() != 3*bus.DefaultHeartbeat {
		t.Errorf("default workers TTL %v", status.TTL())
	}
	if status, _ := def.Ledger.Status(t.Context()); status.TTL() != bus.DefaultDedupeWindow {
		t.Errorf("default ledger TTL %v", status.TTL())
	}
	if _, err := store.SkillsStore(t.Context(), js, bus.NewSubjects("dep"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := js.ObjectStore(t.Context(), "dep_skills"); err != nil {
		t.Fatalf("object store dep_skills: %v", err)
	}
}
