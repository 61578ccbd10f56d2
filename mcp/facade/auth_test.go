package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
)

func TestSessionsAllows(t *testing.T) {
	for _, c := range []struct {
		patterns []string
		id       string
		want     bool
	}{
		{[]string{"s1"}, "s1", true},
		{[]string{"s1"}, "s10", false},
		{[]string{"dev-*"}, "dev-1", true},
		{[]string{"dev-*"}, "dev-", true},
		{[]string{"dev-*"}, "prod", false},
		{[]string{"*"}, "anything", true},
		{nil, "s1", false},
		{[]string{"a", "b*"}, "bc", true},
	} {
		if got := Sessions(c.patterns).Allows(c.id); got != c.want {
			t.Errorf("%v allows %q: %v, want %v", c.patterns, c.id, got, c.want)
		}
	}
	for _, bad := range []string{"", "a.b", "a*b", "**", "a b*", strings.Repeat("x", 129)} {
		if _, err := ParseSessions([]string{bad}); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr                    string
		authenticated, insecure bool
		ok                      bool
	}{
		{"127.0.0.1:8080", false, true, true},
		{"[::1]:8080", false, true, true},
		{"localhost:8080", false, true, true},
		{"0.0.0.0:8080", false, true, false},
		{":8080", false, true, false},
		{"10.1.2.3:8080", false, true, false},
		{"example.com:8080", false, true, false},
		{"127.0.0.1:8080", false, false, false}, // no auth and not insecure
		{"0.0.0.0:8080", true, false, true},
		{"0.0.0.0:8080", true, true, false}, // both is a mistake
	} {
		err := CheckListen(c.addr, c.authenticated, c.insecure)
		if (err == nil) != c.ok {
			t.Errorf("%s auth=%v insecure=%v: %v", c.addr, c.authenticated, c.insecure, err)
		}
	}
	if err := CheckListen("0.0.0.0:8080", false, true); err == nil || !strings.Contains(err.Error(), "only a loopback address") {
		t.Fatalf("error: %v", err)
	}
}

func TestParseTokens(t *testing.T) {
	good := "tokens:\n- {name: a, token: " + HashToken("secret-of-alice-123") + ", user: alice, sessions: [s1, \"dev-*\"], confirm: approvers}\n" +
		"- {token: secret-of-bob-12345, user: bob, sessions: [\"*\"]}\n"
	entries, err := parseTokens("good", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Confirm != ConfirmApprovers || entries[1].Name != "token 2" {
		t.Fatalf("%+v", entries)
	}
	for name, bad := range map[string]string{
		"empty":          "tokens: []",
		"unknown member": "tokens:\n- {token: secret-of-bob-12345, user: bob, sessions: [s1], admin: true}",
		"short token":    "tokens:\n- {token: short, user: bob, sessions: [s1]}",
		"bad hash":       "tokens:\n- {token: \"sha256:abcd\", user: bob, sessions: [s1]}",
		"no user":        "tokens:\n- {token: secret-of-bob-12345, sessions: [s1]}",
		"no sessions":    "tokens:\n- {token: secret-of-bob-12345, user: bob}",
		"bad session":    "tokens:\n- {token: secret-of-bob-12345, user: bob, sessions: [a.b]}",
		"bad confirm":    "tokens:\n- {token: secret-of-bob-12345, user: bob, sessions: [s1], confirm: anyone}",
		"twice":          "tokens:\n- {token: secret-of-bob-12345, user: bob, sessions: [s1]}\n- {token: secret-of-bob-12345, user: eve, sessions: [s1]}",
		"not yaml":       "tokens: [",
	} {
		if _, err := parseTokens(name, []byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("tokens:\n- {token: secret-of-bob-12345, user: bob, sessions: [s1, \"x*\"], confirm: host_user}"))
	f.Add([]byte(`{"tokens":[{"token":"sha256:00","user":"u","sessions":["*"]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := parseTokens("fuzz", b)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.User == "" || len(e.Sessions) == 0 {
				t.Fatalf("accepted an entry without user or sessions: %+v", e)
			}
		}
	})
}

// Tokens of the authenticated env.
const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
)

// newTokenEnv is newEnv with the token file authenticating alice (a1 and
// team-*, host_user) and bob (b1, approvers).
func newTokenEnv(t *testing.T) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte("tokens:\n"+
		"- {name: alice, token: "+HashToken(aliceToken)+", user: alice, sessions: [a1, \"team-*\"], confirm: host_user}\n"+
		"- {name: bob, token: "+bobToken+", user: bob, sessions: [b1], confirm: approvers}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tk, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	return startEnv(t, false, func(c *Config) { c.Auth, c.Insecure = tk, false })
}

// post sends one JSON-RPC initialize to /mcp/<s> with headers.
func (e *env) post(t *testing.T, s string, headers map[string]string) *http.Response {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/mcp/"+s, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

func bearerOf(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

// TestTokenAuth: no token, a wrong one, one for another session and a
// spoofed user header are refused before anything is published; a good
// token's calls run as its user.
func TestTokenAuth(t *testing.T) {
	e := newTokenEnv(t)
	calls := make(chan *nats.Msg, 64)
	nc := e.conn(t, xtest.RoleClient)
	sub, err := nc.ChanSubscribe("toolbus.call.>", calls)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	resp := e.post(t, "a1", nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") ||
		strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("no token: HTTP %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	for _, h := range []map[string]string{bearerOf("not-a-token-of-anyone"), {"Authorization": "Basic YWxpY2U6eA=="}, bearerOf(HashToken(aliceToken))} {
		if resp := e.post(t, "a1", h); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Fatalf("%v: HTTP %d %q", h, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if resp := e.post(t, "b1", bearerOf(aliceToken)); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("alice's token for bob's session: HTTP %d", resp.StatusCode)
	}
	spoof := bearerOf(aliceToken)
	spoof["X-Toolbus-User"] = "bob"
	if resp := e.post(t, "a1", spoof); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("alice's token claiming bob: HTTP %d", resp.StatusCode)
	}

	// The positive control: alice's own call in team-x, with her user
	// header (the same user) and no header. It is the first batch
	// published: none of the refused requests published anything.
	own := bearerOf(aliceToken)
	own["X-Toolbus-User"] = "alice"
	c := e.connectHeaders(t, "team-x", mcp.ProtocolVersion20251125, own)
	if r, err := call(t, c, "whoami", map[string]any{}, false); err != nil || r.IsError || textOf(r) != "user alice" {
		t.Fatalf("whoami as alice: %+v %v", r, err)
	}
	m := testkit.Recv(t, calls, bound, "alice's batch")
	var b struct {
		User json.RawMessage `json:"user"`
	}
	ev, err := bus.Decode(m)
	if err != nil || m.Subject != "toolbus.call.team-x" || ev.DataAs(&b) != nil || string(b.User) != `"alice"` {
		t.Fatalf("first batch published: %s %s %v", m.Subject, m.Data, err)
	}
	c2 := e.connectHeaders(t, "b1", mcp.ProtocolVersion20260728, bearerOf(bobToken))
	if r, err := call(t, c2, "whoami", map[string]any{}, false); err != nil || textOf(r) != "user bob" {
		t.Fatalf("whoami as bob: %+v %v", r, err)
	}
	if m := testkit.Recv(t, calls, bound, "bob's batch"); m.Subject != "toolbus.call.b1" {
		t.Fatalf("second batch on %s", m.Subject)
	}
}

// TestApproversPolicy: under approvers no elicitation is offered (a host
// that supports it is not asked, in either era) and its user cannot
// confirm; the call parks for the approvers and completes when one
// answers.
func TestApproversPolicy(t *testing.T) {
	e := newTokenEnv(t)
	for _, version := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		t.Run(version, func(t *testing.T) {
			s := "b1"
			if err := e.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
				t.Fatal(err)
			}
			e.resetTools(t, s, map[string]bool{"ops": true})
			el := &elicitor{decision: choiceAllowAlways, asked: make(chan string, 4)}
			c := e.connectHeaders(t, s, version, bearerOf(bobToken), mcpclient.WithElicitationHandler(el))
			if caps := c.GetServerCapabilities(); caps.Elicitation != nil {
				t.Fatalf("elicitation offered under approvers: %+v", caps.Elicitation)
			}
			yes := true
			r := e.answerWhileWaiting(t, c, s, "deploy", bus.Answer{Confirmed: &yes})
			if r == nil || r.IsError || textOf(r) != "deployed" {
				t.Fatalf("confirmed by an approver: %+v", r)
			}
			if len(el.asked) != 0 {
				t.Fatalf("the host was asked: %q", <-el.asked)
			}
			// No rule was added by the host: the next call parks again.
			no := false
			if r := e.answerWhileWaiting(t, c, s, "deploy", bus.Answer{Confirmed: &no}); r == nil || !r.IsError {
				t.Fatalf("denied by an approver: %+v", r)
			}
		})
	}
}

// TestEviction: 10,000 distinct sessions come and go through the HTTP
// handler with a bound of 100 and a short idle time: at most 100 are
// kept, all are dropped once idle, the goroutines return to the
// baseline and the heap does not grow with the count. Run with -v for
// the numbers.
func TestEviction(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 sessions")
	}
	const maxKept = 100
	total := 10000
	if raceEnabled {
		total = 2500 // still 25 times the bound; run without -race for 10,000
	}
	if n, err := strconv.Atoi(os.Getenv("EVICTION_SESSIONS")); err == nil && n > 1200 {
		total = n // a quicker run while developing
	}
	e := startEnv(t, false, func(c *Config) { c.Idle, c.MaxSessions, c.Poll = 200*time.Millisecond, maxKept, time.Second })
	h := e.f.Handler()
	open := func(from, to int) {
		t.Helper()
		work := make(chan int)
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				for i := range work {
					if err := initialize(t.Context(), h, "ev"+itoa(i)); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for i := from; i < to; i++ {
			work <- i
			if n := e.f.Sessions(); n > maxKept {
				t.Fatalf("%d sessions kept, bound %d", n, maxKept)
			}
		}
		close(work)
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	drained := func() {
		t.Helper()
		testkit.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
			if n := e.f.Sessions(); n > 0 {
				return fmt.Errorf("%d sessions still kept", n)
			}
			return nil
		})
	}
	// Warm up: the deployment-wide watches start with the first session.
	open(0, 200)
	drained()
	base := settledGoroutines(0)
	heap0 := heapInUse()
	start := time.Now()
	open(200, 1200)
	drained()
	heap1 := heapInUse()
	open(1200, total)
	drained()
	elapsed := time.Since(start)
	heap2 := heapInUse()
	g := settledGoroutines(base)
	t.Logf("%d sessions in %s; %d dropped; goroutines %d → %d; heap in use %.1f → %.1f (1,000 more) → %.1f MiB (the rest)",
		total, elapsed.Round(time.Millisecond), e.f.evicted.Load(), base, g, mib(heap0), mib(heap1), mib(heap2))
	if g > base+5 {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("goroutines %d after the sessions went, %d before:\n%s", g, base, b.String())
	}
	if growth := int64(heap2) - int64(heap1); growth > 8<<20 {
		t.Fatalf("heap grew %.1f MiB over %d more sessions", mib(uint64(growth)), total-1200)
	}
	// A session that comes back is served again.
	if err := initialize(t.Context(), h, "ev1"); err != nil {
		t.Fatal(err)
	}
}

// TestLRUFull: when every kept MCP server is busy, a new session is
// refused with 503 and Retry-After rather than kept beyond the bound.
func TestLRUFull(t *testing.T) {
	e := startEnv(t, false, func(c *Config) { c.MaxSessions = 2 })
	a, err := e.f.acquire(key{"full1", "u", ConfirmHostUser, false})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.f.acquire(key{"full2", "u", ConfirmHostUser, false})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.f.acquire(key{"full3", "u", ConfirmHostUser, false}); err != errFull {
		t.Fatalf("a third session with two busy: %v", err)
	}
	rec := &recorder{header: http.Header{}}
	e.f.Handler().ServeHTTP(rec, initRequest(t.Context(), "full3"))
	if rec.status != http.StatusServiceUnavailable || rec.header.Get("Retry-After") == "" {
		t.Fatalf("HTTP %d %v", rec.status, rec.header)
	}
	e.f.table.release(a)
	if err := initialize(t.Context(), e.f.Handler(), "full3"); err != nil {
		t.Fatalf("after one was released: %v", err)
	}
	e.f.table.release(b)
	if got := e.f.Sessions(); got != 2 {
		t.Fatalf("%d sessions kept", got)
	}
}

func initRequest(ctx context.Context, s string) *http.Request {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/mcp/"+s, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Toolbus-User", "u")
	return req
}

// initialize sends initialize for session s to h in process.
func initialize(ctx context.Context, h http.Handler, s string) error {
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, initRequest(ctx, s))
	if rec.status != 0 && rec.status != http.StatusOK {
		return &httpError{rec.status, rec.body.String()}
	}
	return nil
}

type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return "HTTP " + itoa(e.status) + ": " + e.body }

// recorder is a minimal http.ResponseWriter (httptest.ResponseRecorder
// keeps more than the test needs).
type recorder struct {
	header http.Header
	status int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Flush() {}

func itoa(i int) string { return strconv.Itoa(i) }

// settledGoroutines waits (bounded) until the count of goroutines outside
// idle pools is at most limit (limit 0: until it stops changing) and
// returns it. Idle pool goroutines are left out: they outlive a burst by a
// minute, as many as the burst's concurrency (bounded by pool.MaxIdle), and
// a loaded machine makes bursts wider, so counting them made this test
// depend on the load rather than on what sessions leave behind.
func settledGoroutines(limit int) int {
	deadline := time.Now().Add(30 * time.Second)
	last, same := -1, 0
	for time.Now().Before(deadline) {
		n := busyGoroutines()
		if limit > 0 && n <= limit {
			return n
		}
		if n == last {
			if same++; limit == 0 && same >= 10 {
				return n
			}
		} else {
			last, same = n, 0
		}
		time.Sleep(50 * time.Millisecond) // bounded polling of a count, not synchronisation
	}
	return busyGoroutines()
}

// busyGoroutines counts the goroutines but those waiting for work in a
// pool (internal/pool), read from every goroutine's stack.
func busyGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.HasPrefix(g, "goroutine ") {
			continue
		}
		if (strings.Contains(g, "[select") || strings.Contains(g, "[chan receive")) && idleInPool(g) {
			continue
		}
		count++
	}
	return count
}

// idleInPool reports whether a goroutine's stack has the pool's work loop
// as its first frame outside the runtime (its wait for a task), so not a task.
func idleInPool(stack string) bool {
	for _, line := range strings.Split(stack, "\n")[1:] {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "runtime.") {
			continue
		}
		return strings.Contains(line, "internal/pool.(*Pool).work")
	}
	return false
}

// heapInUse returns the bytes of live objects after two collections:
// HeapAlloc, not HeapInuse, whose spans also count the fragmentation the
// allocator keeps, which moves with the load beside the test and not with
// the sessions.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// TestHostUserAuthenticated: an authenticated host_user host confirms its
// own call through elicitation, one call at a time: it is offered no
// "allow and remember" (a rule would be the whole session's, for other
// users too), and sending that choice allows the call without a rule.
func TestHostUserAuthenticated(t *testing.T) {
	e := newTokenEnv(t)
	const s = "a1"
	if err := e.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	e.resetTools(t, s, map[string]bool{"ops": true})
	el := &elicitor{decision: choiceAllowAlways, asked: make(chan string, 4)}
	c := e.connectHeaders(t, s, mcp.ProtocolVersion20251125, bearerOf(aliceToken), mcpclient.WithElicitationHandler(el))
	for range 2 {
		if r, err := call(t, c, "deploy", map[string]any{}, false); err != nil || r.IsError || textOf(r) != "deployed" {
			t.Fatalf("deploy confirmed by alice's host: %+v %v", r, err)
		}
		testkit.Recv(t, el.asked, bound, "the elicitation (asked every time: no rule was added)")
	}
	sess := e.f.newSession(key{s, "alice", ConfirmHostUser, false})
	defer sess.cancel()
	p := confirmParams(bus.Parked{Name: "deploy"}, sess.tasks.confirms.remember)
	choices := p.RequestedSchema.(map[string]any)["properties"].(map[string]any)["decision"].(map[string]any)["enum"].([]string)
	if slices.Contains(choices, choiceAllowAlways) {
		t.Fatalf("an authenticated host is offered %v", choices)
	}
}
