package facade

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// The parts of a session and of the Facade that are pure logic, on their
// own with fakes (docs/mcp.md "Structure").

// TestParkFor: a parked call is waited for its tool's timeout, or
// ParkWait when longer, but a quiet host no longer than QuietHold.
func TestParkFor(t *testing.T) {
	c := &Config{ParkWait: 2 * time.Minute, QuietHold: 45 * time.Second}
	for _, tc := range []struct {
		timeout time.Duration
		quiet   bool
		want    time.Duration
	}{
		{10 * time.Minute, false, 10 * time.Minute},
		{30 * time.Second, false, 2 * time.Minute}, // ParkWait is the least
		{10 * time.Minute, true, 45 * time.Second}, // a quiet host is answered first
		{30 * time.Second, true, 45 * time.Second}, // ParkWait, then cut to QuietHold
		{20 * time.Second, true, 45 * time.Second},
	} {
		if got := c.parkFor(tc.timeout, tc.quiet); got != tc.want {
			t.Errorf("parkFor(%v, quiet %v) = %v, want %v", tc.timeout, tc.quiet, got, tc.want)
		}
	}
	if got := (&Config{QuietHold: time.Minute}).parkFor(10*time.Second, true); got != 10*time.Second {
		t.Errorf("a short tool for a quiet host: %v", got)
	}
}

// TestInterruptOnEnd: a call whose context ended is interrupted on the
// bus, except a kept one (a task's) while its facade closes.
func TestInterruptOnEnd(t *testing.T) {
	open := context.Background()
	closed, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		keep    bool
		closing context.Context
		want    bool
	}{
		{false, open, true},
		{false, closed, true},
		{true, open, true}, // a task cancelled by its host: tasks/cancel
		{true, closed, false},
	} {
		if got := interruptOnEnd(tc.keep, tc.closing); got != tc.want {
			t.Errorf("keep %v, closing %v: %v, want %v", tc.keep, tc.closing.Err(), got, tc.want)
		}
	}
}

// TestConfirmParams: "allow and remember" is offered only when remember.
func TestConfirmParams(t *testing.T) {
	p := bus.Parked{Name: "deploy", Input: []byte(`{"env":"prod"}`)}
	for _, remember := range []bool{false, true} {
		params := confirmParams(p, remember)
		props := params.RequestedSchema.(map[string]any)["properties"].(map[string]any)
		choices := props["decision"].(map[string]any)["enum"].([]string)
		if slices.Contains(choices, choiceAllowAlways) != remember || !slices.Contains(choices, choiceAllow) || !slices.Contains(choices, choiceDeny) {
			t.Errorf("remember %v: %v", remember, choices)
		}
		if !strings.Contains(params.Message, "deploy") || !strings.Contains(params.Message, `{"env":"prod"}`) {
			t.Errorf("message %q", params.Message)
		}
	}
	// A park that left its input out (3.2, 1.19) names its digest instead.
	big := bus.Parked{Name: "deploy", InputOmitted: true, InputDigest: "sha256:abc"}
	if m := confirmParams(big, false).Message; !strings.Contains(m, "too large to show here (sha256:abc;") {
		t.Errorf("message %q", m)
	}
}

// TestClaims: a question is put to one host at a time, at most maxAsked
// at once.
func TestClaims(t *testing.T) {
	var c claims
	if !c.claim("a") || c.claim("a") {
		t.Fatal("a question claimed twice")
	}
	c.unclaim("a")
	if !c.claim("a") {
		t.Fatal("an unclaimed question cannot be claimed again")
	}
	for i := 1; i < maxAsked; i++ {
		if !c.claim(strconv.Itoa(i)) {
			t.Fatalf("claim %d refused", i)
		}
	}
	if c.claim("one more") {
		t.Fatalf("more than %d claimed", maxAsked)
	}
}

// fakeSession is a session as the table sees it: no MCP server, no bus.
func fakeSession(id, user string) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{id: id, user: user, policy: ConfirmApprovers, dirty: make(chan struct{}, 1), ctx: ctx, cancel: cancel,
		confirms: &confirmer{pending: map[string]*round{}}}
}

// TestTable: the session table on its own: a new session is counted, the
// one made meanwhile wins, the least recently used idle one makes room,
// all busy is errFull, the idle ones are swept, and changes mark the
// sessions of one bus session or all.
func TestTable(t *testing.T) {
	var evicted atomic.Int64
	tb := newTable(context.Background(), time.Minute, 2, &evicted)
	noop := func() {}
	k := func(s string) key { return key{s, "u", ConfirmApprovers, false} }
	a, b := fakeSession("a", "u"), fakeSession("b", "u")
	if got, err := tb.add(k("a"), a, noop); got != a || err != nil {
		t.Fatalf("add a: %v %v", got, err)
	}
	if other, err := tb.add(k("a"), fakeSession("a", "u"), noop); other != a || err != nil {
		t.Fatalf("a made meanwhile: %v %v", other, err)
	}
	tb.release(a) // the second add counted a request too
	started := false
	if _, err := tb.add(k("b"), b, func() { started = true }); err != nil || !started {
		t.Fatalf("add b: %v, started %v", err, started)
	}
	if tb.use(k("nope")) != nil || tb.use(k("b")) != b {
		t.Fatal("use")
	}
	tb.release(b)
	c := fakeSession("c", "u")
	if _, err := tb.add(k("c"), c, noop); !errors.Is(err, errFull) {
		t.Fatalf("a third with two busy: %v", err)
	}
	if tb.len() != 2 || evicted.Load() != 0 {
		t.Fatalf("len %d, evicted %d", tb.len(), evicted.Load())
	}
	tb.release(b)
	tb.release(a) // a is now the most recently used
	if got, err := tb.add(k("c"), c, noop); got != c || err != nil {
		t.Fatalf("add c with two idle: %v %v", got, err)
	}
	if evicted.Load() != 1 || tb.use(k("b")) != nil || b.ctx.Err() == nil {
		t.Fatalf("the least recently used idle one (b) was not dropped: evicted %d", evicted.Load())
	}
	// A call waiting for the host user's decision keeps its session.
	c.confirms.pending["state"] = &round{}
	tb.release(c)
	tb.dropIdle(time.Now().Add(2 * time.Minute))
	if tb.use(k("c")) != c || tb.use(k("a")) != nil || a.ctx.Err() == nil {
		t.Fatal("sweep: the waiting one must stay, the idle one go")
	}
	tb.release(c)
	tb.changed("c")
	select {
	case <-c.dirty:
	default:
		t.Fatal("changed(c) did not mark c")
	}
	tb.changed("")
	select {
	case <-c.dirty:
	default:
		t.Fatal("changed(\"\") did not mark c")
	}
	closed, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newTable(closed, time.Minute, 2, &evicted).add(k("x"), fakeSession("x", "u"), noop); err == nil {
		t.Fatal("added to a closed facade's table")
	}
}

// authFunc is an Authenticator from a function.
type authFunc func(*http.Request) (Identity, error)

func (f authFunc) Authenticate(r *http.Request) (Identity, error) { return f(r) }

// TestGatekeeper: the HTTP front's checks on their own: no credentials
// or bad ones 401, a session or a user header the identity may not use
// 403, insecure takes the user header.
func TestGatekeeper(t *testing.T) {
	alice := authFunc(func(r *http.Request) (Identity, error) {
		switch r.Header.Get("Authorization") {
		case "":
			return Identity{}, ErrNoCredentials
		case "Bearer good":
			return Identity{Name: "a", User: "alice", Sessions: Sessions{"s1"}}, nil
		}
		return Identity{}, errors.New("bad token")
	})
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name          string
		auth          Authenticator
		token, header string
		session       string
		status        int // 0: let through
		user          string
	}{
		{"no credentials", alice, "", "", "s1", http.StatusUnauthorized, ""},
		{"bad token", alice, "bad", "", "s1", http.StatusUnauthorized, ""},
		{"good", alice, "good", "", "s1", 0, "alice"},
		{"its own user header", alice, "good", "alice", "s1", 0, "alice"},
		{"another session", alice, "good", "", "s2", http.StatusForbidden, ""},
		{"another user", alice, "good", "bob", "s1", http.StatusForbidden, ""},
		{"insecure", nil, "", "carol", "s9", 0, "carol"},
	} {
		g := &gatekeeper{auth: tc.auth, userHeader: "X-Toolbus-User", log: log}
		r := httptest.NewRequest("POST", "/mcp/"+tc.session, nil)
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if tc.header != "" {
			r.Header.Set("X-Toolbus-User", tc.header)
		}
		w := httptest.NewRecorder()
		id, ok := g.gate(w, r, tc.session)
		switch {
		case tc.status == 0 && (!ok || id.User != tc.user):
			t.Errorf("%s: refused (%d) or user %q", tc.name, w.Code, id.User)
		case tc.status != 0 && (ok || w.Code != tc.status):
			t.Errorf("%s: ok %v, HTTP %d, want %d", tc.name, ok, w.Code, tc.status)
		case tc.status == http.StatusUnauthorized && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer"):
			t.Errorf("%s: no challenge", tc.name)
		}
	}
}

// fakeCallBus parks every call at once and counts P.cancel; its watch
// closes when the watch's context ends, as client.Watch's does.
type fakeCallBus struct {
	mu      sync.Mutex
	cancels int
}

func (f *fakeCallBus) Watch(ctx context.Context, _ string) (events, error) {
	ch := make(chan *bus.Event)
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(ctx, func() { close(ch) })
	return events{C: ch, Stop: cancel}, nil
}

func (f *fakeCallBus) Call(context.Context, string, bus.Batch, ...client.CallOption) (*bus.Reply, error) {
	return &bus.Reply{Parked: []bus.Parked{{ID: "p1", Name: "ask", Kind: bus.KindExternal, Subject: "P.answer.ask"}}}, nil
}

func (f *fakeCallBus) Cancel(context.Context, string, string, ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels++
	return nil
}

// TestCallerEnd: a parked call whose request ends is interrupted on the
// bus exactly once; a task's call (keep) whose facade closes never is,
// whichever of ctx.Done and the closed watch run picks first (both are
// ready together, so a hundred rounds would see the watch's way taken).
func TestCallerEnd(t *testing.T) {
	for _, keep := range []bool{false, true} {
		for range 100 {
			fb := &fakeCallBus{}
			closing, closeFacade := context.WithCancel(context.Background())
			c := &caller{bus: fb, session: "s1", user: "alice", closing: closing,
				cfg: &Config{QuietHold: time.Hour, ProgressEvery: time.Hour},
				list: func(context.Context, string, string, string) (*bus.ToolsList, error) {
					return nil, errors.New("no listing")
				},
				mayElicit: func(context.Context) bool { return false },
			}
			// A task's call runs on the facade's context; a host's on its
			// request's.
			ctx, endRequest := context.WithCancel(closing)
			parked := make(chan struct{})
			done := make(chan error, 1)
			req := mcp.CallToolRequest{}
			req.Params.Name = "ask"
			go func() {
				_, err := c.run(ctx, req, runOpts{keep: keep, onPark: func(bus.Parked, time.Time) { close(parked) }})
				done <- err
			}()
			testkit.Recv(t, parked, 10*time.Second, "the park")
			if keep {
				closeFacade()
			} else {
				endRequest()
			}
			if err := testkit.Recv(t, done, 10*time.Second, "run's end"); err == nil {
				t.Fatal("run ended without its context's error")
			}
			want := 1
			if keep {
				want = 0
			}
			fb.mu.Lock()
			got := fb.cancels
			fb.mu.Unlock()
			endRequest()
			closeFacade()
			if got != want {
				t.Fatalf("keep %v: %d cancels, want %d", keep, got, want)
			}
		}
	}
}
