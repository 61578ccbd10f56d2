package router_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/xtest"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

type noInput struct{}

// guardDeployment starts routers with cfg and a worker serving paid
// (read-only), deploy (a write tool) and get_weather (group weather).
func guardDeployment(t *testing.T, cluster bool, routers int, g router.Guard) (*xtest.Deployment, *atomic.Int64) {
	t.Helper()
	d := xtest.Run(t, xtest.Config{Cluster: cluster, Routers: routers, Router: router.Config{Guard: g,
		Groups: []bus.Group{{Name: "weather", Description: "Weather forecasts.", Scope: bus.ScopeMeta}}}})
	var runs atomic.Int64
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		run := func(context.Context, *worker.Call, noInput) (string, error) { runs.Add(1); return "ok", nil }
		for _, def := range []bus.ToolDef{
			{Name: "paid", Description: "A paid lookup.", ReadOnly: true},
			{Name: "deploy", Description: "Deploy the service.", Permission: bus.PermissionAllow},
			{Name: "get_weather", Description: "Current weather for a city.", ReadOnly: true, Groups: []string{"weather"}},
		} {
			if err := worker.Register(w, def, run); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "paid", "deploy", "get_weather"); err != nil {
		t.Fatal(err)
	}
	return d, &runs
}

// TestLimitSharedByRouters: two routers on two nodes of the 3-node
// cluster share one budget exactly: N calls run across both, every later
// one ends limit_exceeded with retry_after_ms and nothing runs.
func TestLimitSharedByRouters(t *testing.T) {
	const n = 5
	d, runs := guardDeployment(t, true, 2, router.Guard{Limits: limits.Policy{Rules: []limits.Rule{
		{Name: "paid-daily", Tools: []string{"paid"}, Per: []string{limits.PerUser}, Budget: &limits.Budget{Units: n}},
		{Name: "writes", Writes: true, Rate: &limits.Rate{Calls: 1, IntervalMS: 3600_000}},
	}}})
	a, b := newClient(t, d), newClient(t, d) // on different nodes
	var ok, refused int
	for i := range 2 * n {
		c := a
		if i%2 == 1 {
			c = b
		}
		reply, err := c.Call(t.Context(), "s1", bus.Batch{User: json.RawMessage(`"alice"`), Calls: []bus.Call{{ID: "c1", Name: "paid"}}})
		if err != nil {
			t.Fatal(err)
		}
		switch res := reply.Results[0]; {
		case res.State == bus.StateSuccess:
			ok++
		case res.Error != nil && res.Error.Code == bus.CodeLimitExceeded && res.Error.RetryAfterMS > 0 &&
			strings.Contains(res.Error.Message, "paid-daily"):
			refused++
		default:
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	if ok != n || refused != n || runs.Load() != n {
		t.Fatalf("%d ran, %d refused, the worker ran %d; want %d, %d, %d", ok, refused, runs.Load(), n, n, n)
	}
	// Another user has a budget of its own.
	reply, err := a.Call(t.Context(), "s2", bus.Batch{User: json.RawMessage(`"bob"`), Calls: []bus.Call{{ID: "c1", Name: "paid"}}})
	if err != nil || reply.Results[0].State != bus.StateSuccess {
		t.Fatalf("bob: %+v %v", reply, err)
	}
	// The write tool's lower limit.
	for i, want := range []string{bus.StateSuccess, bus.StateError} {
		reply, err := b.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "w", Name: "deploy"}}})
		if err != nil || reply.Results[0].State != want {
			t.Fatalf("deploy %d: %+v %v", i, reply, err)
		}
	}
	var usage struct {
		Limits []limits.Usage `json:"limits"`
	}
	if err := a.Admin(t.Context(), "limits", "", map[string]string{"tool": "paid", "user": "alice"}, &usage); err != nil {
		t.Fatal(err)
	}
	if len(usage.Limits) != 1 || usage.Limits[0].Used != n || usage.Limits[0].Left != 0 {
		t.Fatalf("limits %+v", usage.Limits)
	}
	var reset map[string]int
	if err := a.Admin(t.Context(), "limits.reset", "", map[string]string{"rule": "paid-daily", "user": "alice"}, &reset); err != nil || reset["reset"] != 1 {
		t.Fatalf("reset %v %v", reset, err)
	}
	reply, err = b.Call(t.Context(), "s1", bus.Batch{User: json.RawMessage(`"alice"`), Calls: []bus.Call{{ID: "c1", Name: "paid"}}})
	if err != nil || reply.Results[0].State != bus.StateSuccess {
		t.Fatalf("after reset: %+v %v", reply, err)
	}
}

// TestSearchThroughRouter: search_tools is listed, and a batch that
// searches with activate runs the found tool in its next call.
func TestSearchThroughRouter(t *testing.T) {
	d, runs := guardDeployment(t, false, 1, router.Guard{Search: true, Pinned: groups.Pins{Tools: []string{"paid"}}})
	c := newClient(t, d)
	list, err := c.Tools(t.Context(), "s1", bus.FormatOpenAI, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(list.Tools)
	for _, name := range []string{groups.SearchTools, groups.ResetTools, "paid"} {
		if !strings.Contains(string(raw), `"`+name+`"`) {
			t.Fatalf("listing lacks %s: %s", name, raw)
		}
	}
	if strings.Contains(string(raw), `"get_weather"`) {
		t.Fatal("get_weather listed before its group is active")
	}
	reply, err := c.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{
		{ID: "s", Name: groups.SearchTools, Input: json.RawMessage(`{"query":"weather in a city","activate":true}`)},
		{ID: "w", Name: "get_weather"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Results) != 2 || reply.Results[0].State != bus.StateSuccess || reply.Results[1].State != bus.StateSuccess {
		t.Fatalf("results %+v", reply.Results)
	}
	if text := reply.Results[0].Output[0].Text; !strings.Contains(text, "get_weather") || !strings.Contains(text, "activated tool group(s): weather") {
		t.Fatalf("search said %q", text)
	}
	if runs.Load() != 1 {
		t.Fatalf("worker ran %d", runs.Load())
	}
	reply, err = c.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "s", Name: groups.SearchTools, Input: json.RawMessage(`{"query":""}`)}}})
	if err != nil || reply.Results[0].Error == nil || reply.Results[0].Error.Code != bus.CodeInvalidInput {
		t.Fatalf("empty query: %+v %v", reply, err)
	}
}

// TestResultCache: a repeated call of a cached read-only tool is answered
// from the cache, marked, without running; another user (scope user) runs
// it again; a write tool with cache_ttl_ms is refused at registration.
func TestResultCache(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 2, Router: router.Config{Guard: router.Guard{Cache: true}}})
	var runs atomic.Int64
	type in struct {
		City string `json:"city"`
	}
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "lookup", Description: "Look up a city.", ReadOnly: true, CacheTTLMS: 3600_000, CacheScope: "user"},
			func(_ context.Context, _ *worker.Call, i in) (string, error) { runs.Add(1); return "weather in " + i.City, nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "lookup"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, d)
	call := func(session, user, city string) bus.Result {
		t.Helper()
		reply, err := c.Call(t.Context(), session, bus.Batch{User: json.RawMessage(`"` + user + `"`),
			Calls: []bus.Call{{ID: "c1", Name: "lookup", Input: json.RawMessage(`{"city":"` + city + `"}`)}}})
		if err != nil || len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
			t.Fatalf("call: %+v %v", reply, err)
		}
		return reply.Results[0]
	}
	first := call("s1", "alice", "Oslo")
	if strings.Contains(string(first.Metadata), "toolbus_cache") {
		t.Fatalf("a miss is marked: %s", first.Metadata)
	}
	second := call("s2", "alice", "Oslo") // another session, same user: scope user
	if runs.Load() != 1 || !strings.Contains(string(second.Metadata), `"hit":true`) || second.Output[0].Text != "weather in Oslo" {
		t.Fatalf("runs %d, second %+v", runs.Load(), second)
	}
	call("s1", "bob", "Oslo")   // another user
	call("s1", "alice", "Rome") // another input
	if runs.Load() != 3 {
		t.Fatalf("runs %d, want 3", runs.Load())
	}
	if reason, _ := registry.Check(&bus.ToolDef{Name: "w", InputSchema: json.RawMessage(`{"type":"object"}`), CacheTTLMS: 1000,
		Permission: bus.PermissionPassthrough, RuleMatcher: bus.MatcherNone}); !strings.Contains(reason, "only for read_only or idempotent") {
		t.Fatalf("a write tool with cache_ttl_ms: %q", reason)
	}
}
