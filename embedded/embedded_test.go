package embedded_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
)

func TestStartEmbeddedRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  embedded.Config
		want string
	}{
		{"listen without port", embedded.Config{Listen: "localhost"}, "listen address"},
		{"port not a number", embedded.Config{Listen: "localhost:http"}, "listen port"},
		{"missing config file", embedded.Config{ConfigFile: filepath.Join(t.TempDir(), "nope.conf")}, "nats config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := embedded.Start(tc.cfg)
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
	s, err := embedded.Start(embedded.Config{ConfigFile: conf, StoreDir: filepath.Join(dir, "js"), ReadyTimeout: bound})
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
	js := testkit.JetStream(t, nc)
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
