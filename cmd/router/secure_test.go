package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
)

// TestSecure: router --secure DIR generates the roles' users, starts the
// embedded server with them and logs in as router; the agent logs in with
// the generated seed and inbox prefix and calls a built-in tool, and
// cannot reach P.exec.>.
func TestSecure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	url := startSecure(t, dir)
	for _, u := range []string{"router", "worker", "agent", "approver", "operator"} {
		if _, err := os.Stat(security.SeedFile(dir, u)); err != nil {
			t.Fatal(err)
		}
		env, err := os.ReadFile(security.EnvFile(dir, u))
		if err != nil || !strings.Contains(string(env), "NATS_INBOX_PREFIX=_INBOX."+u+"\n") {
			t.Fatalf("%s.env: %q %v", u, env, err)
		}
	}
	if fi, err := os.Stat(security.SeedFile(dir, "agent")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the agent's seed file is not private: %v %v", fi.Mode(), err)
	}
	violations := make(chan error, 16)
	nc, err := natsconn.Config{URLs: url, NKey: security.SeedFile(dir, "agent"), InboxPrefix: "_INBOX.agent"}.Connect("test",
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := client.New(nc, client.Config{})
	var reply *bus.Reply
	testkit.CheckFor(t, testkit.SetupWait, 10*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), testkit.SetupWait)
		defer cancel()
		reply, err = cl.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}}})
		if err == nil && reply.Results[0].State != bus.StateSuccess {
			err = &bus.Error{Code: reply.Results[0].State, Message: reply.Results[0].Output[0].Text}
		}
		return err
	})
	if err := nc.Publish("toolbus.exec.echo", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-violations:
		if !strings.Contains(err.Error(), `Permissions Violation for Publish to "toolbus.exec.echo"`) {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent published on toolbus.exec.echo")
	}
	if _, err := (natsconn.Config{URLs: url}).Connect("t", nats.MaxReconnects(0)); err == nil {
		t.Fatal("connected without credentials")
	}
}

// startSecure runs the router with --secure dir on a random port and
// returns its URL.
func startSecure(t *testing.T, dir string) string {
	t.Helper()
	m, _ := startRun(t, []string{"--secure", dir, "--listen", "127.0.0.1:-1", "--data", filepath.Join(t.TempDir(), "data"), "--heartbeat", "500ms"},
		regexp.MustCompile(`serving prefix "toolbus" on (\S+)`))
	return m[1]
}

// startRun runs the router with args until the test ends (then it must
// exit within 40 s) and returns the submatches of want once its stdout
// holds it, and its stderr; a router that ends before that fails the test.
func startRun(t *testing.T, args []string, want *regexp.Regexp) (match []string, stderr *testkit.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout testkit.Buffer
	stderr = new(testkit.Buffer)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		if err := testkit.Recv(t, done, 40*time.Second, "the router's exit"); err != nil {
			t.Errorf("router: %v\n%s", err, stderr.String())
		}
	})
	testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		select {
		case err := <-done:
			done <- err // for the clean-up
			t.Fatalf("router ended: %v\n%s", err, stderr.String())
		default:
		}
		if match = want.FindStringSubmatch(stdout.String()); match == nil {
			return os.ErrNotExist
		}
		return nil
	})
	return match, stderr
}

func TestSecureRefusesNats(t *testing.T) {
	err := run(t.Context(), []string{"--secure", t.TempDir(), "--nats", "nats://127.0.0.1:1"}, &testkit.Buffer{}, &testkit.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--secure") {
		t.Fatalf("--secure with --nats: %v", err)
	}
}

// TestSecureReuses: a second router started with the same DIR uses the
// users already there (the first router's seed still logs in).
func TestSecureReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	startSecure(t, dir)
	seed, err := os.ReadFile(security.SeedFile(dir, "router"))
	if err != nil {
		t.Fatal(err)
	}
	url := startSecure(t, dir)
	again, _ := os.ReadFile(security.SeedFile(dir, "router"))
	if string(seed) != string(again) {
		t.Fatal("the second start generated new users")
	}
	nc, err := natsconn.Config{URLs: url, NKey: security.SeedFile(dir, "operator")}.Connect("t")
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// TestSecureAgentOnDemand: a per-session agent user added to a running
// router's --secure DIR (security.AddAgent, what `toolbus security agent`
// runs) works without a restart: the router reloads the embedded server's
// users and its identities. The new user logs in and calls in its session
// as its bound user, a claim of another user is refused, and the shared
// agent user, already connected, may no longer publish there.
func TestSecureAgentOnDemand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	url := startSecure(t, dir)
	violations := make(chan error, 16)
	shared, err := natsconn.Config{URLs: url, NKey: security.SeedFile(dir, "agent"), InboxPrefix: "_INBOX.agent"}.Connect("shared",
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	echo := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}}}
	testkit.CheckFor(t, testkit.SetupWait, 10*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), testkit.SetupWait)
		defer cancel()
		_, err := client.New(shared, client.Config{}).Call(ctx, "s5", echo)
		return err
	})

	added := time.Now()
	a, err := security.AddAgent(dir, "s5", "carol")
	if err != nil {
		t.Fatal(err)
	}
	if !a.Created || a.User.Name != "session-s5" || a.User.User != "carol" {
		t.Fatalf("AddAgent: %+v", a)
	}
	var agent *nats.Conn
	testkit.CheckFor(t, testkit.SetupWait, 50*time.Millisecond, func() error {
		nc, err := natsconn.Config{URLs: url, NKey: a.Seed, InboxPrefix: a.User.InboxPrefix}.Connect("s5", nats.MaxReconnects(0))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(t.Context(), testkit.SetupWait)
		defer cancel()
		// Bound once the router's identities have it too.
		if _, err := client.New(nc, client.Config{}).Call(ctx, "s5", bus.Batch{Calls: echo.Calls, User: json.RawMessage(`"dave"`)}); err == nil || !strings.Contains(err.Error(), `bound to user "carol"`) {
			nc.Close()
			return fmt.Errorf("not bound yet: %v", err)
		}
		agent = nc
		return nil
	})
	defer agent.Close()
	t.Logf("session-s5 logged in and bound %v after AddAgent", time.Since(added).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = client.New(agent, client.Config{}).Call(ctx, "s5", bus.Batch{Calls: echo.Calls, User: json.RawMessage(`"dave"`)})
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeDenied {
		t.Fatalf("a claim of dave as carol: %v", err)
	}
	reply, err := client.New(agent, client.Config{}).Call(ctx, "s5", echo)
	if err != nil || reply.Results[0].State != bus.StateSuccess {
		t.Fatalf("session-s5's call: %+v %v", reply, err)
	}
	// The shared agent's connection from before is refused in s5 now.
	if err := shared.Publish("toolbus.call.s5", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_ = shared.Flush()
	select {
	case err := <-violations:
		if !strings.Contains(err.Error(), `Permissions Violation for Publish to "toolbus.call.s5"`) {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shared agent still publishes in s5")
	}
}
