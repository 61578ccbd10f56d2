package embedded_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAdoptGlobalStore: a store written with every login in the global
// account (a secured deployment before session 29) keeps its streams,
// buckets and messages when the configuration puts the logins in named
// accounts: the one account with JetStream adopts the global account's
// store, once; a second start leaves it as it is.
func TestAdoptGlobalStore(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "js")
	conf := func(body string) string {
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	start := func(path string) (*nats.Conn, func()) {
		s, err := embedded.Start(embedded.Config{ConfigFile: path, StoreDir: store, ReadyTimeout: bound})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("router", "secret"))
		if err != nil {
			t.Fatal(err)
		}
		return nc, func() { nc.Close(); s.Shutdown(); s.WaitForShutdown() }
	}
	nc, stop := start(conf("authorization {\n  users = [{user: router, password: secret}]\n}\n"))
	js := testkit.JetStream(t, nc)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "toolbus_sessions"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "s1", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	stop()

	accounts := conf("accounts {\n  toolbus: {jetstream: enabled, users = [{user: router, password: secret}]}\n  toolbus-worker: {users = [{user: worker, password: secret}]}\n}\n")
	for range 2 {
		nc, stop = start(accounts)
		js = testkit.JetStream(t, nc)
		kv, err = js.KeyValue(t.Context(), "toolbus_sessions")
		if err != nil {
			t.Fatalf("the bucket in the named account: %v", err)
		}
		e, err := kv.Get(t.Context(), "s1")
		if err != nil || string(e.Value()) != "kept" {
			t.Fatalf("s1: %v %v", e, err)
		}
		stop()
	}
	if _, err := os.Stat(filepath.Join(store, "jetstream", "$G")); !os.IsNotExist(err) {
		t.Fatalf("the global account's store is still there: %v", err)
	}
}
