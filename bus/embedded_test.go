package bus_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

func TestStartEmbeddedRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  bus.EmbeddedConfig
		want string
	}{
		{"listen without port", bus.EmbeddedConfig{Listen: "localhost"}, "listen address"},
		{"port not a number", bus.EmbeddedConfig{Listen: "localhost:http"}, "listen port"},
		{"missing config file", bus.EmbeddedConfig{ConfigFile: filepath.Join(t.TempDir(), "nope.conf")}, "nats config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := bus.StartEmbedded(tc.cfg)
			if err == nil {
				s.Shutdown()
				s.WaitForShutdown()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestStartEmbeddedConfigFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	body := "port: -1\nhost: 127.0.0.1\nauthorization {\n  user: agent\n  password: secret\n}\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{ConfigFile: conf, StoreDir: filepath.Join(dir, "js"), ReadyTimeout: bound})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	// The file's settings apply: users must authenticate.
	if nc, err := nats.Connect(s.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("connected without credentials")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("agent", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// JetStream is on, with the given store directory.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(t.Context()); err != nil {
		t.Fatalf("JetStream: %v", err)
	}
	if !strings.HasPrefix(s.JetStreamConfig().StoreDir, filepath.Join(dir, "js")) {
		t.Fatalf("store dir %s", s.JetStreamConfig().StoreDir)
	}
	if mp := nc.MaxPayload(); mp != 8<<20 {
		t.Fatalf("max payload %d", mp)
	}
}

func TestSetupConfig(t *testing.T) {
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := bus.StoreConfig{Heartbeat: 2 * time.Second, DedupeWindow: time.Minute, SessionTTL: time.Hour,
		EventsMaxAge: 2 * time.Hour, HandoffMaxAge: 3 * time.Hour, Memory: true}
	st, err := bus.Setup(t.Context(), js, bus.NewSubjects("dep"), cfg)
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
		{st.Handoff, "DEP_HANDOFF", []string{"dep.external.>", "dep.confirm.>"}, 3 * time.Hour},
	} {
		info, err := tc.stream.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Name != tc.name || strings.Join(info.Config.Subjects, ",") != strings.Join(tc.subjects, ",") || info.Config.MaxAge != tc.maxAge {
			t.Errorf("stream %+v", info.Config)
		}
	}
	// Defaults.
	def, err := bus.Setup(t.Context(), js, bus.NewSubjects("dflt"), bus.StoreConfig{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := def.Workers.Status(t.Context()); status.TTL() != 3*bus.DefaultHeartbeat {
		t.Errorf("default workers TTL %v", status.TTL())
	}
	if status, _ := def.Ledger.Status(t.Context()); status.TTL() != bus.DefaultDedupeWindow {
		t.Errorf("default ledger TTL %v", status.TTL())
	}
	if _, err := bus.SkillsStore(t.Context(), js, bus.NewSubjects("dep"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := js.ObjectStore(t.Context(), "dep_skills"); err != nil {
		t.Fatalf("object store dep_skills: %v", err)
	}
}
