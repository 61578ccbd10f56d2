package security_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
)

// TestRefreshUpgradesAccounts: a directory whose users.json is this
// version's but whose nats-server.conf an older one rendered (here session
// 28's shape: every login in the global account) is rewritten by Refresh,
// every seed unchanged. Before, a worker's JetStream request with reply
// toolbus.events.s1 had JetStream publish into s1's events (red team 28c);
// after, the worker logs in with its kept seed into its own account, where
// JetStream's answer lands, and its request with its own inbox is answered.
func TestRefreshUpgradesAccounts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	users, err := security.Generate(dir, "", security.Spec{Sessions: []string{"s1"}})
	if err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(dir, security.ServerConfigFile)
	conf, _ := os.ReadFile(confFile)
	if err := os.WriteFile(confFile, []byte(withoutAccounts(string(conf))), 0o600); err != nil {
		t.Fatal(err)
	}
	seeds := map[string]string{}
	for _, u := range users {
		b, _ := os.ReadFile(security.SeedFile(dir, u.Name))
		seeds[u.Name] = string(b)
	}
	if got, account := attackEvents(t, dir, users); got == nil || account != "" {
		t.Fatalf("the old configuration (the worker in account %q) did not let its request publish in s1's events", account)
	}
	if changed, err := security.Refresh(dir); err != nil || !changed {
		t.Fatalf("refresh: %v %v", changed, err)
	}
	if now, _ := os.ReadFile(confFile); string(now) != string(conf) {
		t.Fatalf("not this version's configuration:\n%s", now)
	}
	for name, seed := range seeds {
		if now, _ := os.ReadFile(security.SeedFile(dir, name)); string(now) != seed {
			t.Errorf("%s's seed changed", name)
		}
	}
	if info, err := os.Stat(confFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", confFile, info.Mode(), err)
	}
	got, account := attackEvents(t, dir, users)
	if got != nil {
		t.Fatalf("after the refresh, JetStream published on %s: %s", got.Subject, got.Data)
	}
	if account != "toolbus-worker" {
		t.Fatalf("the worker logged in to account %s", account)
	}
}

// withoutAccounts is conf's users, keys and permissions as session 28
// rendered them: one authorization block, no accounts.
func withoutAccounts(conf string) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	in := false
	for line := range strings.Lines(conf) {
		t := strings.TrimSpace(line)
		in = in || strings.HasPrefix(t, "# ") && strings.Contains(t, " (role ")
		if in {
			b.WriteString(line)
		}
		in = in && t != "}}"
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// attackEvents starts a server with dir's configuration and has the worker
// ask JetStream for a consumer's info with reply toolbus.events.s1, then
// with its own inbox (which must be answered); it returns what the router
// read on toolbus.events.> meanwhile, nil if nothing, and the worker's account
// ("" for the global one).
func attackEvents(t *testing.T, dir string, users []security.User) (*nats.Msg, string) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, ConfigFile: filepath.Join(dir, security.ServerConfigFile), StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	login := func(name string) *nats.Conn {
		u, _ := security.Lookup(users, name)
		nc, err := natsconn.Config{URLs: srv.ClientURL(), NKey: security.SeedFile(dir, name), InboxPrefix: u.InboxPrefix}.Connect("test-" + name)
		if err != nil {
			t.Fatalf("log in as %s: %v", name, err)
		}
		return nc
	}
	router, worker := login(security.RoleRouter), login(security.RoleWorker)
	defer router.Close()
	defer worker.Close()
	watch, err := router.SubscribeSync("toolbus.events.>")
	if err == nil {
		err = router.Flush()
	}
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: "$JS.API.CONSUMER.INFO.TOOLBUS_WORK.any", Reply: "toolbus.events.s1"}
	if err := worker.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	m.Reply = ""
	if _, err := worker.RequestMsg(m, 10*time.Second); err != nil {
		t.Fatalf("the worker's request with its own inbox: %v", err)
	}
	got, _ := watch.NextMsg(time.Second)
	conns, err := srv.Connz(&server.ConnzOptions{Username: true}) // the account of a login outside the global one
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(conns.Conns, func(c *server.ConnInfo) bool { return c.Name == "test-worker" })
	if i < 0 {
		t.Fatal("no worker connection")
	}
	return got, conns.Conns[i].Account
}
