package limits

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
)

// clock is a fake clock shared by the limiters of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func newLimiter(t *testing.T, nc *nats.Conn, p Policy, replicas int, now func() time.Time) *Limiter {
	t.Helper()
	js := testkit.JetStream(t, nc)
	l, err := New(t.Context(), js, bus.NewSubjects(bus.DefaultPrefix), Config{Policy: p, Replicas: replicas, Now: now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func TestPolicyCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule Rule
		want string // "" for valid
	}{
		{"rate", Rule{Name: "r", Rate: &Rate{Calls: 10, IntervalMS: 1000}}, ""},
		{"budget", Rule{Name: "b", Per: []string{PerUser, PerTenant}, Budget: &Budget{Units: 5}}, ""},
		{"bad name", Rule{Name: "a b", Budget: &Budget{Units: 5}}, "must match"},
		{"bad tool", Rule{Name: "r", Tools: []string{"a.b"}, Budget: &Budget{Units: 5}}, "tool name"},
		{"bad per", Rule{Name: "r", Per: []string{"ip"}, Budget: &Budget{Units: 5}}, "per \"ip\""},
		{"empty", Rule{Name: "r"}, "neither a rate nor a budget"},
		{"zero calls", Rule{Name: "r", Rate: &Rate{IntervalMS: 1000}}, "calls > 0"},
		{"too long", Rule{Name: "r", Rate: &Rate{Calls: 1, IntervalMS: int64(48 * time.Hour / time.Millisecond)}}, "use a budget"},
		{"zero units", Rule{Name: "r", Budget: &Budget{}}, "units > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Rules: []Rule{tc.rule}}
			err := p.Check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && (err == nil || !contains(err.Error(), tc.want)):
				t.Fatalf("Check = %v, want an error with %q", err, tc.want)
			}
		})
	}
	p := Policy{Rules: []Rule{{Name: "a", Budget: &Budget{Units: 1}}, {Name: "a", Budget: &Budget{Units: 1}}}}
	if err := p.Check(); err == nil || !contains(err.Error(), "twice") {
		t.Fatalf("duplicate rule: %v", err)
	}
	p = Policy{Rules: []Rule{{Name: "r", Rate: &Rate{Calls: 4, IntervalMS: 1000}}}}
	if err := p.Check(); err != nil || p.Rules[0].Rate.Burst != 4 {
		t.Fatalf("burst default: %v %+v", err, p.Rules[0].Rate)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// shareOneLimit runs 2n calls, alternating between two limiters (two
// routers), all at once, and checks that exactly n are admitted and every
// refusal says when to retry.
func shareOneLimit(t *testing.T, a, b *Limiter, n int, kind string) {
	t.Helper()
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range 2 * n {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			ref, err := l.Check(t.Context(), Call{Tool: "search", User: "alice", Session: "s1"})
			switch {
			case err != nil:
				errs <- err
			case ref == nil:
				admitted.Add(1)
			case ref.Kind != kind || ref.RetryAfterMS() <= 0:
				errs <- fmt.Errorf("refusal %+v", ref)
			default:
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if admitted.Load() != int64(n) || refused.Load() != int64(n) {
		t.Fatalf("admitted %d, refused %d; want %d each", admitted.Load(), refused.Load(), n)
	}
	ref, err := b.Check(t.Context(), Call{Tool: "search", User: "alice", Session: "s1"})
	if err != nil || ref == nil {
		t.Fatalf("call %d: %v %v, want a refusal", 2*n+1, ref, err)
	}
	if msg := ref.Message("search"); !contains(msg, "LimitExceededError") || !contains(msg, fmt.Sprint(ref.RetryAfterMS())) {
		t.Fatalf("message %q", msg)
	}
}

func sharedPolicy(n int) Policy {
	return Policy{Rules: []Rule{
		{Name: "per-hour", Tools: []string{"search"}, Per: []string{PerUser}, Rate: &Rate{Calls: n, IntervalMS: 3600_000}},
		{Name: "daily", Tools: []string{"search"}, Per: []string{PerUser}, Budget: &Budget{Units: int64(n)}},
	}}
}

func TestTwoRoutersShareOneLimit(t *testing.T) {
	s := testkit.RunServer(t)
	const n = 8
	for _, tc := range []struct {
		kind string
		p    Policy
	}{
		{KindRate, Policy{Rules: sharedPolicy(n).Rules[:1]}},
		{KindBudget, Policy{Rules: sharedPolicy(n).Rules[1:]}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
			a := newLimiter(t, testkit.Connect(t, s), tc.p, 1, clk.Now)
			b := newLimiter(t, testkit.Connect(t, s), tc.p, 1, clk.Now)
			shareOneLimit(t, a, b, n, tc.kind)
		})
	}
}

func TestTwoRoutersShareOneLimitOnCluster(t *testing.T) {
	c := testkit.RunCluster(t)
	const n = 6
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	a := newLimiter(t, testkit.ConnectURL(t, c.URL(0)), sharedPolicy(n), 3, clk.Now)
	b := newLimiter(t, testkit.ConnectURL(t, c.URL(2)), sharedPolicy(n), 3, clk.Now)
	// Both rules count each call: the n admitted calls take a rate slot
	// and a budget unit each, and the refused ones neither (rollback).
	var admitted int
	for i := range 2 * n {
		l := []*Limiter{a, b}[i%2]
		ref, err := l.Check(t.Context(), Call{Tool: "search", User: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			admitted++
		} else if ref.RetryAfterMS() <= 0 {
			t.Fatalf("refusal without a retry time: %+v", ref)
		}
	}
	if admitted != n {
		t.Fatalf("admitted %d, want %d", admitted, n)
	}
	us, err := a.Usage(t.Context(), Call{Tool: "search", User: "alice"})
	if err != nil || len(us) != 2 {
		t.Fatalf("Usage = %+v, %v", us, err)
	}
	for _, u := range us {
		if u.Used != n || u.Left != 0 {
			t.Errorf("usage %+v, want %d used, 0 left", u, n)
		}
	}
}

func TestRateRefillsAndBurst(t *testing.T) {
	s := testkit.RunServer(t)
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	// 10 calls a second on average, at most 3 at once.
	l := newLimiter(t, testkit.Connect(t, s), Policy{Rules: []Rule{{Name: "r", Rate: &Rate{Calls: 10, IntervalMS: 1000, Burst: 3}}}}, 1, clk.Now)
	c := Call{Tool: "t"}
	for i := range 3 {
		if ref, err := l.Check(t.Context(), c); err != nil || ref != nil {
			t.Fatalf("call %d: %+v %v", i, ref, err)
		}
	}
	ref, err := l.Check(t.Context(), c)
	if err != nil || ref == nil || ref.RetryAfter != 100*time.Millisecond {
		t.Fatalf("4th call: %+v %v, want refused for 100ms", ref, err)
	}
	clk.Set(clk.Now().Add(100 * time.Millisecond))
	if ref, err := l.Check(t.Context(), c); err != nil || ref != nil {
		t.Fatalf("after 100ms: %+v %v", ref, err)
	}
	if ref, err := l.Check(t.Context(), c); err != nil || ref == nil {
		t.Fatalf("again at once: %+v %v, want refused", ref, err)
	}
}

func TestBudgetAcrossDayBoundary(t *testing.T) {
	s := testkit.RunServer(t)
	clk := &clock{t: time.Date(2026, 12, 1, 23, 59, 58, 0, time.UTC)}
	l := newLimiter(t, testkit.Connect(t, s), Policy{Rules: []Rule{{Name: "d", Per: []string{PerUser}, Budget: &Budget{Units: 10, Cost: 4}}}}, 1, clk.Now)
	c := Call{Tool: "paid", User: "bob"}
	for i := range 2 {
		if ref, err := l.Check(t.Context(), c); err != nil || ref != nil {
			t.Fatalf("call %d: %+v %v", i, ref, err)
		}
	}
	ref, err := l.Check(t.Context(), c) // 12 > 10
	if err != nil || ref == nil || ref.Kind != KindBudget || ref.RetryAfter != 2*time.Second {
		t.Fatalf("3rd call: %+v %v, want refused until midnight", ref, err)
	}
	clk.Set(time.Date(2026, 12, 2, 0, 0, 1, 0, time.UTC))
	if ref, err := l.Check(t.Context(), c); err != nil || ref != nil {
		t.Fatalf("next day: %+v %v", ref, err)
	}
	us, err := l.Usage(t.Context(), c)
	if err != nil || len(us) != 1 || us[0].Used != 4 || us[0].Left != 6 {
		t.Fatalf("usage next day = %+v, %v", us, err)
	}
}

func TestRestartKeepsCount(t *testing.T) {
	dir := t.TempDir()
	start := func() (*nats.Conn, func()) {
		s, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, StoreDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		stop := func() { s.Shutdown(); s.WaitForShutdown() }
		t.Cleanup(stop)
		return testkit.Connect(t, s), stop
	}
	p := Policy{Rules: []Rule{
		{Name: "rate", Rate: &Rate{Calls: 2, IntervalMS: 3600_000}},
		{Name: "budget", Tools: []string{"b"}, Budget: &Budget{Units: 2}},
	}}
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	nc, stop := start()
	l := newLimiter(t, nc, p, 1, clk.Now)
	for _, tool := range []string{"a", "b"} {
		if ref, err := l.Check(t.Context(), Call{Tool: tool}); err != nil || ref != nil {
			t.Fatalf("%s: %+v %v", tool, ref, err)
		}
	}
	// The server, and with it every router, goes away and comes back on
	// the same store; a new limiter (a restarted router) sees the counts.
	nc.Close()
	stop()
	nc2, _ := start()
	l2 := newLimiter(t, nc2, p, 1, clk.Now)
	ref, err := l2.Check(t.Context(), Call{Tool: "a"})
	if err != nil || ref == nil || ref.Rule != "rate" {
		t.Fatalf("after restart: %+v %v, want the rate refused", ref, err)
	}
	us, err := l2.Usage(t.Context(), Call{Tool: "b"})
	if err != nil || len(us) != 2 || us[1].Used != 1 {
		t.Fatalf("usage after restart = %+v, %v", us, err)
	}
}

func TestWritesRulesAndRollback(t *testing.T) {
	s := testkit.RunServer(t)
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	l := newLimiter(t, testkit.Connect(t, s), Policy{Rules: []Rule{
		{Name: "all", Per: []string{PerSession}, Budget: &Budget{Units: 3}},
		{Name: "writes", Writes: true, Per: []string{PerSession}, Budget: &Budget{Units: 1}},
	}}, 1, clk.Now)
	w := Call{Tool: "deploy", Session: "s1"}
	r := Call{Tool: "read", ReadOnly: true, Session: "s1"}
	if ref, err := l.Check(t.Context(), w); err != nil || ref != nil {
		t.Fatalf("first write: %+v %v", ref, err)
	}
	// The second write is refused by "writes"; what "all" counted for it
	// is taken back, so two reads still fit.
	if ref, err := l.Check(t.Context(), w); err != nil || ref == nil || ref.Rule != "writes" {
		t.Fatalf("second write: %+v %v", ref, err)
	}
	for i := range 2 {
		if ref, err := l.Check(t.Context(), r); err != nil || ref != nil {
			t.Fatalf("read %d: %+v %v", i, ref, err)
		}
	}
	if ref, err := l.Check(t.Context(), r); err != nil || ref == nil || ref.Rule != "all" {
		t.Fatalf("4th call: %+v %v", ref, err)
	}
	// Another session has its own counts.
	if ref, err := l.Check(t.Context(), Call{Tool: "deploy", Session: "s2"}); err != nil || ref != nil {
		t.Fatalf("other session: %+v %v", ref, err)
	}
	if n, err := l.Reset(t.Context(), "", w); err != nil || n != 2 {
		t.Fatalf("Reset = %d, %v", n, err)
	}
	if ref, err := l.Check(t.Context(), w); err != nil || ref != nil {
		t.Fatalf("after reset: %+v %v", ref, err)
	}
	if _, err := l.Reset(t.Context(), "nope", w); err == nil {
		t.Fatal("Reset of an unknown rule: no error")
	}
}

func TestTenantFromConfigOnly(t *testing.T) {
	s := testkit.RunServer(t)
	l := newLimiter(t, testkit.Connect(t, s), Policy{
		Rules:   []Rule{{Name: "t", Per: []string{PerTenant}, Budget: &Budget{Units: 1}}},
		Tenants: map[string]string{"alice": "acme", "bob": "acme"},
	}, 1, nil)
	if ref, err := l.Check(t.Context(), Call{Tool: "x", User: "alice"}); err != nil || ref != nil {
		t.Fatalf("alice: %+v %v", ref, err)
	}
	if ref, err := l.Check(t.Context(), Call{Tool: "x", User: "bob"}); err != nil || ref == nil {
		t.Fatalf("bob shares acme's budget: %+v %v", ref, err)
	}
	if ref, err := l.Check(t.Context(), Call{Tool: "x", User: "mallory"}); err != nil || ref != nil {
		t.Fatalf("an unmapped user: %+v %v", ref, err)
	}
	if ref, err := l.Check(t.Context(), Call{Tool: "x", User: "eve"}); err != nil || ref == nil {
		t.Fatalf("unmapped users share one tenant: %+v %v", ref, err)
	}
}

// A call with no user counts per user under its session's own login, apart
// from the shared agent's (no login) and from any user's.
func TestPerUserLogin(t *testing.T) {
	s := testkit.RunServer(t)
	l := newLimiter(t, testkit.Connect(t, s), Policy{
		Rules: []Rule{{Name: "u", Per: []string{PerUser}, Budget: &Budget{Units: 1}}},
	}, 1, nil)
	for _, tc := range []struct {
		call    Call
		refused bool
	}{
		{Call{Tool: "x"}, false},                                     // the shared agent
		{Call{Tool: "x", Login: "session-s2"}, false},                // its own count
		{Call{Tool: "x", User: "alice", Login: "session-s1"}, false}, // a user counts as the user
		{Call{Tool: "x", User: "alice"}, true},
		{Call{Tool: "x", Login: "session-s2"}, true},
		{Call{Tool: "x"}, true},
		{Call{Tool: "x", Login: "session-s3"}, false},
	} {
		if ref, err := l.Check(t.Context(), tc.call); err != nil || (ref != nil) != tc.refused {
			t.Fatalf("%+v: refused %+v (%v), want refused %v", tc.call, ref, err, tc.refused)
		}
	}
}

// TestRuleMatches: what a rule counts, cache hits included (pure logic).
func TestRuleMatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule Rule
		call Call
		want bool
	}{
		{"every tool", Rule{}, Call{Tool: "a"}, true},
		{"named tool", Rule{Tools: []string{"a"}}, Call{Tool: "a"}, true},
		{"other tool", Rule{Tools: []string{"a"}}, Call{Tool: "b"}, false},
		{"writes: a write", Rule{Writes: true}, Call{Tool: "a"}, true},
		{"writes: a read", Rule{Writes: true}, Call{Tool: "a", ReadOnly: true}, false},
		{"a cache hit by default", Rule{}, Call{Tool: "a", ReadOnly: true, CacheHit: true}, false},
		{"a cache hit, cache_hits", Rule{CacheHits: true}, Call{Tool: "a", ReadOnly: true, CacheHit: true}, true},
		{"a miss, cache_hits", Rule{CacheHits: true}, Call{Tool: "a", ReadOnly: true}, true},
		{"a cache hit, cache_hits, other tool", Rule{CacheHits: true, Tools: []string{"b"}}, Call{Tool: "a", CacheHit: true}, false},
	} {
		if got := tc.rule.matches(tc.call); got != tc.want {
			t.Errorf("%s: matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCacheHitsCountOnlyWhereAsked: a call answered by the cache spends
// no budget and no rate unless the rule says cache_hits; a miss then
// spends as before.
func TestCacheHitsCountOnlyWhereAsked(t *testing.T) {
	s := testkit.RunServer(t)
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	l := newLimiter(t, testkit.Connect(t, s), Policy{Rules: []Rule{
		{Name: "budget", Tools: []string{"a"}, Budget: &Budget{Units: 1}},
		{Name: "rate", Tools: []string{"a"}, Rate: &Rate{Calls: 1, IntervalMS: 3600_000}},
		{Name: "hits", Tools: []string{"h"}, CacheHits: true, Budget: &Budget{Units: 1}},
	}}, 1, clk.Now)
	hit := Call{Tool: "a", ReadOnly: true, CacheHit: true}
	for i := range 5 {
		if ref, err := l.Check(t.Context(), hit); err != nil || ref != nil {
			t.Fatalf("hit %d: %+v %v", i, ref, err)
		}
	}
	miss := Call{Tool: "a", ReadOnly: true}
	if ref, err := l.Check(t.Context(), miss); err != nil || ref != nil {
		t.Fatalf("first miss: %+v %v", ref, err)
	}
	if ref, err := l.Check(t.Context(), miss); err != nil || ref == nil || ref.Rule != "budget" {
		t.Fatalf("second miss: %+v %v, want refused by budget", ref, err)
	}
	if ref, err := l.Check(t.Context(), hit); err != nil || ref != nil {
		t.Fatalf("a hit once the budget is spent: %+v %v", ref, err)
	}
	h := Call{Tool: "h", ReadOnly: true, CacheHit: true}
	if ref, err := l.Check(t.Context(), h); err != nil || ref != nil {
		t.Fatalf("cache_hits, first hit: %+v %v", ref, err)
	}
	if ref, err := l.Check(t.Context(), h); err != nil || ref == nil || ref.Rule != "hits" {
		t.Fatalf("cache_hits, second hit: %+v %v, want refused", ref, err)
	}
}
