// Package security tests the shipped role permissions (package security)
// on a real nats-server started with the generated configuration: each
// role's allowed paths work end to end, and what a role must not do is
// refused by NATS itself with a permissions violation.
package security

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

const (
	testHeartbeat = 500 * time.Millisecond
	bound         = 10 * time.Second
)

// spec is the deployment every test generates: three session agents, s1
// bound to alice and s3 to bob (s2 to nobody), and a handler of the
// external tool pick.
var spec = security.Spec{
	Sessions: []string{"s1", "s2", "s3"},
	Bind:     map[string]string{"s1": "alice", "s3": "bob"},
	Handlers: []security.Handler{{Name: "picker", Tools: []string{"pick"}}},
}

// deployment is a secured deployment: the server started with the
// generated nats-server.conf, a router logged in as router.
type deployment struct {
	t     *testing.T
	dir   string
	srv   *server.Server // where conn logs in
	users []security.User
	creds bool // users log in with dir/<user>.creds (JWT accounts), not their nkey seeds
}

func newDeployment(t *testing.T, configure ...func(*router.Config)) *deployment {
	t.Helper()
	return newDeploymentOf(t, spec, configure...)
}

// newDeploymentOf is newDeployment with the users of spec.
func newDeploymentOf(t *testing.T, spec security.Spec, configure ...func(*router.Config)) *deployment {
	t.Helper()
	dir := t.TempDir()
	users, err := security.Generate(filepath.Join(dir, "secure"), "", spec)
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{t: t, dir: filepath.Join(dir, "secure"), users: users}
	d.srv, err = embedded.Start(embedded.Config{MaxStore: embedded.Roomy, ConfigFile: filepath.Join(d.dir, security.ServerConfigFile), StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.srv.Shutdown(); d.srv.WaitForShutdown() })
	ids, err := security.LoadBindings(filepath.Join(d.dir, security.UsersFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg := router.Config{Logger: slog.New(slog.DiscardHandler), Store: store.Config{Heartbeat: testHeartbeat}, Identities: ids}
	for _, f := range configure {
		f(&cfg)
	}
	r, err := router.New(d.conn("router").nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	return d
}

// login is one user's connection and the permission violations NATS
// reported on it.
type login struct {
	t    *testing.T
	name string
	nc   *nats.Conn
	mu   sync.Mutex
	errs []error
	seen chan struct{} // pulsed when an error arrives
}

// conn logs in as user with its generated nkey seed and inbox prefix, as
// an operator would with the user's .env file.
func (d *deployment) conn(user string) *login {
	d.t.Helper()
	u, ok := security.Lookup(d.users, user)
	if !ok {
		d.t.Fatalf("no user %s", user)
	}
	l := &login{t: d.t, name: user, seen: make(chan struct{}, 1)}
	cfg := natsconn.Config{URLs: d.srv.ClientURL(), NKey: security.SeedFile(d.dir, user), InboxPrefix: u.InboxPrefix}
	if d.creds {
		cfg.NKey, cfg.Creds = "", filepath.Join(d.dir, user+".creds")
	}
	nc, err := cfg.Connect("test-"+user, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		l.mu.Lock()
		l.errs = append(l.errs, err)
		l.mu.Unlock()
		select {
		case l.seen <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		d.t.Fatalf("log in as %s: %v", user, err)
	}
	d.t.Cleanup(nc.Close)
	l.nc = nc
	return l
}

func (l *login) client() *client.Client {
	return client.New(l.nc, client.Config{Source: "test/" + l.name})
}

// violation reports whether NATS said subject is forbidden to l for op
// ("Publish" or "Subscription"). A "*" token in subject matches any one
// token (an ordered consumer's random name).
func (l *login) violation(op, subject string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lead := fmt.Sprintf("Permissions Violation for %s to \"", op)
	for _, err := range l.errs {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			continue
		}
		msg := err.Error()
		i := strings.Index(msg, lead)
		if i < 0 {
			continue
		}
		got, _, _ := strings.Cut(msg[i+len(lead):], "\"")
		if tokensMatch(subject, got) {
			return true
		}
	}
	return false
}

// tokensMatch reports whether got is pattern, where a "*" token of
// pattern matches any token.
func tokensMatch(pattern, got string) bool {
	p, g := strings.Split(pattern, "."), strings.Split(got, ".")
	if len(p) != len(g) {
		return false
	}
	for i := range p {
		if p[i] != "*" && p[i] != g[i] {
			return false
		}
	}
	return true
}

// waitViolation waits until NATS reports the violation.
func (l *login) waitViolation(op, subject string) {
	l.t.Helper()
	if err := l.nc.Flush(); err != nil {
		l.t.Fatal(err)
	}
	deadline := time.After(bound)
	for !l.violation(op, subject) {
		select {
		case <-l.seen:
		case <-deadline:
			l.mu.Lock()
			defer l.mu.Unlock()
			l.t.Fatalf("%s: no permissions violation for %s to %q; errors: %v", l.name, op, subject, l.errs)
		}
	}
}

// denyPublish publishes on subject and expects NATS to refuse it.
func (l *login) denyPublish(subject string) {
	l.t.Helper()
	if err := l.nc.Publish(subject, []byte(`{}`)); err != nil {
		l.t.Fatal(err)
	}
	l.waitViolation("Publish", subject)
}

// denySubscribe subscribes to subject and expects NATS to refuse it.
func (l *login) denySubscribe(subject string) {
	l.t.Helper()
	sub, err := l.nc.SubscribeSync(subject)
	if err != nil {
		l.t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	l.waitViolation("Subscription", subject)
}

// noViolations fails when NATS refused anything l did.
func (l *login) noViolations() {
	l.t.Helper()
	_ = l.nc.Flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		if errors.Is(err, nats.ErrPermissionViolation) {
			l.t.Errorf("%s: %v", l.name, err)
		}
	}
}

// startWorker logs in as worker and serves greet (read-only) and deploy
// (asks for a confirmation in the default mode); it also registers the
// external tool pick on its own subject, as a worker of every tool may.
func (d *deployment) startWorker() *login {
	d.t.Helper()
	l := d.conn("worker")
	w, err := worker.New(l.nc, worker.Config{Heartbeat: testHeartbeat})
	if err != nil {
		d.t.Fatal(err)
	}
	schema := json.RawMessage(`{"type":"object","properties":{"who":{"type":"string"}}}`)
	must(d.t, w.Handle(bus.ToolDef{Name: "greet", Description: "Greets.", ReadOnly: true, InputSchema: schema, ConcurrencySafe: true},
		func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
			_ = c.Progress(bus.Block{Type: bus.BlockText, Text: "greeting"})
			return &bus.ExecResult{Output: bus.Text("hello")}, nil
		}))
	must(d.t, w.Handle(bus.ToolDef{Name: "deploy", Description: "Deploys.", InputSchema: schema},
		func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: bus.Text("deployed")}, nil
		}))
	must(d.t, w.Handle(bus.ToolDef{Name: "bigread", Description: "A large output.", ReadOnly: true, InputSchema: schema},
		func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: bus.Text(strings.Repeat("0123456789abcdef", 128<<10))}, nil // 2 MiB: stored
		}))
	must(d.t, w.Handle(bus.ToolDef{Name: "batchjob", Description: "A durable job.", Durable: true, Permission: bus.PermissionAllow, InputSchema: schema},
		func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: bus.Text("job done")}, nil
		}))
	must(d.t, w.Start(d.t.Context()))
	d.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Drain(ctx)
	})
	testkit.Recv(d.t, w.Registered(), bound, "the worker's registration")
	if ack, data := register(d.t, l, "registrar", bus.ToolDef{Name: "pick", Description: "A person picks.", External: true,
		Permission: bus.PermissionAllow, ConcurrencySafe: true, InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}); len(ack.Accepted) != 1 {
		d.t.Fatalf("register pick: %s", data)
	}
	return l
}

// register sends def as worker's registration on its own subject as l and
// returns the router's ack and its data.
func register(t *testing.T, l *login, worker string, def bus.ToolDef) (bus.RegisterAck, json.RawMessage) {
	t.Helper()
	ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/"+worker, bus.Register{Worker: worker, Tools: []bus.ToolDef{def}})
	must(t, err)
	// testCtx, not bound: the answer's wait is CPU by nature (a definition
	// of 5 MiB, TestAttackDefinitionsFillListings, is decoded three times
	// and encoded once, about 2 s of CPU under -race: 11-17 s at load 15);
	// the fault is no answer at all.
	msg, err := bus.SendRequest(testCtx(t), l.nc, bus.NewSubjects("").Workers.Register(def.Name), ev)
	must(t, err)
	resp, err := bus.Decode(msg)
	must(t, err)
	var ack bus.RegisterAck
	must(t, resp.DataAs(&ack))
	return ack, resp.Data
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitType returns the first event of type typ from ev (others skipped).
func waitType(t *testing.T, ev *client.Events, typ string) *bus.Event {
	t.Helper()
	deadline := time.After(bound)
	for {
		select {
		case e, ok := <-ev.C:
			if !ok {
				t.Fatalf("events ended before %s", typ)
			}
			if e.Type == typ {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event", typ)
		}
	}
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }

// noViolationsBut fails when NATS refused anything l did on a subject
// that starts with none of allowed.
func (l *login) noViolationsBut(allowed ...string) {
	l.t.Helper()
	_ = l.nc.Flush()
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, err := range l.errs {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			continue
		}
		for _, a := range allowed {
			if strings.Contains(err.Error(), `"`+a) {
				continue next
			}
		}
		l.t.Errorf("%s: %v", l.name, err)
	}
}
