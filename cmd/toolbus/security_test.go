package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

// TestSecuredDeployment: `toolbus security config --out DIR` writes a
// configuration a server starts with; a router and a worker log in with
// their seeds; `toolbus call` logs in as session s1's agent from the nats
// CLI's environment variables (or the flags, which win), works in s1 and
// cannot call in s2.
func TestSecuredDeployment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	out, _, err := exec(t.Context(), "security", "config", "--out", dir, "--session", "s1")
	if err != nil || !strings.Contains(out, "nkey:") {
		t.Fatalf("security config --out: %v\n%s", err, out)
	}
	s, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, ConfigFile: filepath.Join(dir, security.ServerConfigFile), StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	login := func(user, inbox string) natsconn.Config {
		return natsconn.Config{URLs: s.ClientURL(), NKey: security.SeedFile(dir, user), InboxPrefix: inbox}
	}
	rnc, err := login("router", security.RouterInbox).Connect("router")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rnc.Close)
	r, err := router.New(rnc, router.Config{Store: store.Config{Heartbeat: testHeartbeat}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	wnc, err := login("worker", "_INBOX.worker").Connect("worker")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	w, err := worker.New(wnc, worker.Config{Heartbeat: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	if err := builtin.RegisterWith(t.Context(), w, builtin.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Drain(ctx)
	})
	testkit.Recv(t, w.Registered(), 10*time.Second, "the worker's registration")

	t.Setenv("NATS_URL", s.ClientURL())
	t.Setenv("NATS_NKEY", security.SeedFile(dir, "session-s1"))
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX.session-s1")
	out, errOut, err := exec(t.Context(), "call", "echo", `{"text":"hi"}`, "--session", "s1")
	if err != nil || !strings.Contains(out, "hi") {
		t.Fatalf("call as session-s1: %v\n%s%s", err, out, errOut)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if out, _, err := exec(ctx, "call", "echo", `{"text":"hi"}`, "--session", "s2"); err == nil {
		t.Fatalf("session-s1 called in s2: %s", out)
	}
	// Flags override the environment: the agent of every session may call in s2.
	out, errOut, err = exec(t.Context(), "call", "echo", `{"text":"hi"}`, "--session", "s2",
		"--nkey", security.SeedFile(dir, "agent"), "--inbox-prefix", "_INBOX.agent")
	if err != nil || !strings.Contains(out, "hi") {
		t.Fatalf("call as agent: %v\n%s%s", err, out, errOut)
	}
	// A wrong login says so.
	_, _, err = exec(t.Context(), "tools", "--nkey", "", "--nats-user", "nobody", "--password", "x")
	if err == nil || !strings.Contains(err.Error(), `refused the login with user "nobody"`) {
		t.Fatalf("a wrong password: %v", err)
	}
	// A verb the role may not use fails at once with the server's refusal,
	// not after a request timeout.
	for _, args := range [][]string{{"activate", "admin", "--session", "s1"}, {"parked"}, {"status"}, {"session", "mode", "bypass", "--session", "s1"}} {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
		_, _, err := exec(ctx, args...)
		cancel()
		var refused *refusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "permissions violation") {
			t.Errorf("%v as session-s1: %v, want the permissions violation", args, err)
		}
		t.Logf("%v refused after %v", args, time.Since(start))
	}
}

func TestSecurityConfigFormats(t *testing.T) {
	out, _, err := exec(t.Context(), "security", "config", "--prefix", "acme", "--handler", "ops=deploy,rollback")
	if err != nil || !strings.Contains(out, "password: $TOOLBUS_HANDLER_OPS_PASSWORD") || !strings.Contains(out, `"acme.answer.rollback"`) {
		t.Fatalf("%v\n%s", err, out)
	}
	out, _, err = exec(t.Context(), "security", "config", "--format", "json", "--session", "s1")
	var users []security.User
	if err != nil || json.Unmarshal([]byte(out), &users) != nil || !has(users, "session-s1") || !has(users, security.RoleFacade) {
		t.Fatalf("json: %v\n%s", err, out)
	}
	// A worker login of its own: its account, its inbox, its tools only.
	out, _, err = exec(t.Context(), "security", "config", "--format", "json", "--worker", "a=greet")
	users = nil
	if err != nil || json.Unmarshal([]byte(out), &users) != nil || !has(users, "worker-a") {
		t.Fatalf("--worker: %v\n%s", err, out)
	}
	if u, _ := security.Lookup(users, "worker-a"); u.Account != "toolbus-worker-a" || u.InboxPrefix != "_INBOX.worker-a" ||
		!slices.Contains(u.Permissions.Subscribe, "toolbus.exec.greet toolbus-exec-greet") {
		t.Fatalf("worker-a: %+v", u)
	}
	out, _, err = exec(t.Context(), "security", "config", "--format", "nsc", "--account", "ACME")
	if err != nil || !strings.Contains(out, "nsc add user --account ACME --name agent") {
		t.Fatalf("nsc: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"security"}, {"security", "show"}, {"security", "config", "--format", "yaml"},
		{"security", "config", "--handler", "ops"}, {"security", "config", "--session", "a.b"},
		{"security", "config", "--worker", "a"}, {"security", "config", "--worker", "a.b=greet"},
		{"security", "config", "--format", "nsc", "--out", t.TempDir()},
	} {
		if _, _, err := exec(t.Context(), args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestSecurityAgent: `toolbus security agent` adds a bound session agent
// to a generated directory and says where its credentials are; bad
// arguments and a directory that holds no users are refused.
func TestSecurityAgent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	if _, _, err := exec(t.Context(), "security", "config", "--out", dir); err != nil {
		t.Fatal(err)
	}
	out, _, err := exec(t.Context(), "security", "agent", "--dir", dir, "--session", "s1", "--user", "alice")
	if err != nil || !strings.Contains(out, `added session-s1 (session s1, bound to user "alice")`) ||
		!strings.Contains(out, security.SeedFile(dir, "session-s1")) || !strings.Contains(out, "source "+security.EnvFile(dir, "session-s1")+" ") {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := security.LoadBindings(filepath.Join(dir, security.UsersFile))
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := b.UserOf("s1"); !ok || u != "alice" {
		t.Fatalf("s1 bound to %q %v", u, ok)
	}
	for _, args := range [][]string{
		{"security", "agent", "--dir", dir},
		{"security", "agent", "--dir", dir, "--session", "a.b"},
		{"security", "agent", "--session", "s2"},
		{"security", "agent", "--dir", t.TempDir(), "--session", "s2"},
		{"security", "agent", "--dir", dir, "--session", "s2", "extra"},
	} {
		if _, _, err := exec(t.Context(), args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestSecurityRefresh: `toolbus security refresh` leaves a current
// directory of --out alone, brings one whose nats-server.conf another
// version wrote back to this version's, every seed kept, and refuses bad
// arguments and a directory that holds no users.
func TestSecurityRefresh(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	if _, _, err := exec(t.Context(), "security", "config", "--out", dir, "--session", "s1"); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, security.ServerConfigFile)
	want, _ := os.ReadFile(conf)
	seed, _ := os.ReadFile(security.SeedFile(dir, "worker"))
	if out, _, err := exec(t.Context(), "security", "refresh", "--dir", dir); err != nil || !strings.Contains(out, "is up to date") {
		t.Fatalf("a current directory: %v\n%s", err, out)
	}
	// Another version's conf: the worker's account links gone (session 28 had none).
	old := strings.ReplaceAll(string(want), "toolbus-worker", "toolbus-other")
	if err := os.WriteFile(conf, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := exec(t.Context(), "security", "refresh", "--dir", dir); err != nil || !strings.Contains(out, "updated the permissions in "+dir) {
		t.Fatalf("an old directory: %v\n%s", err, out)
	}
	got, _ := os.ReadFile(conf)
	after, _ := os.ReadFile(security.SeedFile(dir, "worker"))
	if string(got) != string(want) || string(after) != string(seed) {
		t.Fatalf("refreshed conf equal: %v, seed kept: %v", string(got) == string(want), string(after) == string(seed))
	}
	for _, args := range [][]string{
		{"security", "refresh"},
		{"security", "refresh", "--dir", t.TempDir()},
		{"security", "refresh", "--dir", dir, "extra"},
	} {
		if _, _, err := exec(t.Context(), args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func has(users []security.User, name string) bool { _, ok := security.Lookup(users, name); return ok }

// TestSecurityToken: `toolbus security token` prints a new token and the
// token file entry holding its sha256: digest; the facade's token parser
// accepts the entry and authenticates the token with it, and two runs
// give two tokens.
func TestSecurityToken(t *testing.T) {
	out, _, err := exec(t.Context(), "security", "token", "--name", "laptop", "--user", "alice")
	if err != nil {
		t.Fatal(err)
	}
	token, _, _ := strings.Cut(strings.TrimPrefix(out, "token: "), "\n")
	_, entry, ok := strings.Cut(out, "(router --mcp-tokens FILE):\n")
	if !ok || len(token) < 40 || !strings.Contains(out, "\n"+facade.HashToken(token)+"\n") || strings.Contains(entry, token) {
		t.Fatalf("output:\n%s", out)
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := facade.LoadTokens(path)
	if err != nil {
		t.Fatalf("the entry does not parse: %v\n%s", err, entry)
	}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	id, err := toks.Authenticate(r)
	if err != nil || id.Name != "laptop" || id.User != "alice" {
		t.Fatalf("authenticate: %+v %v", id, err)
	}
	again, _, _ := exec(t.Context(), "security", "token")
	if strings.Contains(again, token) {
		t.Fatal("two runs gave the same token")
	}
}
