package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/rcache"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

type noInput struct{}

// guardDeployment starts routers with cfg and a worker serving paid
// (read-only), deploy (a write tool) and get_weather (group weather).
func guardDeployment(t *testing.T, cluster bool, routers int, g router.Guard, opts ...func(*router.Config)) (*xtest.Deployment, *atomic.Int64) {
	t.Helper()
	rc := router.Config{Guard: g, Groups: []bus.Group{{Name: "weather", Description: "Weather forecasts.", Scope: bus.ScopeMeta}}}
	for _, o := range opts {
		o(&rc)
	}
	d := xtest.Run(t, xtest.Config{Cluster: cluster, Routers: routers, Router: rc})
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
	serve := func(desc string) *worker.Worker {
		w, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
			return worker.Register(w, bus.ToolDef{Name: "lookup", Description: desc, ReadOnly: true, CacheTTLMS: 3600_000, CacheScope: "user"},
				func(_ context.Context, _ *worker.Call, i in) (string, error) {
					runs.Add(1)
					return "weather in " + i.City, nil
				})
		}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w1 := serve("Look up a city.")
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
	// The miss's result is stored after its reply (docs/guardrails.md, "the
	// write is off the call path"): a call through the other router before
	// it lands misses and runs. The second call goes once it has.
	cachedEntry(t, d, "lookup")
	second := call("s2", "alice", "Oslo") // another session, same user: scope user
	if runs.Load() != 1 || !strings.Contains(string(second.Metadata), `"hit":true`) || second.Output[0].Text != "weather in Oslo" {
		t.Fatalf("runs %d, second %+v", runs.Load(), second)
	}
	call("s1", "bob", "Oslo")   // another user
	call("s1", "alice", "Rome") // another input
	if runs.Load() != 3 {
		t.Fatalf("runs %d, want 3", runs.Load())
	}
	// A re-registration with another definition never matches what the
	// old one cached.
	if err := w1.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := d.WaitGone(t.Context(), "lookup"); err != nil {
		t.Fatal(err)
	}
	serve("Look up the weather of a city.")
	if err := d.WaitLive(t.Context(), "lookup"); err != nil {
		t.Fatal(err)
	}
	// Every router lists the new definition (its tools watch delivered it).
	query := func() (*nats.Msg, error) {
		e, err := bus.NewEvent(bus.TypeToolsQuery, "test/agent", bus.ToolsQuery{})
		if err != nil {
			return nil, err
		}
		e.SessionID = "s1"
		return e.Msg(d.Subjects().Tools("s1"))
	}
	if err := d.EveryRouter(t.Context(), query, func(e *bus.Event) error {
		if !strings.Contains(string(e.Data), "Look up the weather of a city.") {
			return fmt.Errorf("old definition listed")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if res := call("s1", "alice", "Oslo"); strings.Contains(string(res.Metadata), "toolbus_cache") || runs.Load() != 4 {
		t.Fatalf("after re-registration: runs %d, %+v", runs.Load(), res)
	}
	if reason, _ := registry.Check(&bus.ToolDef{Name: "w", InputSchema: json.RawMessage(`{"type":"object"}`), CacheTTLMS: 1000,
		Permission: bus.PermissionPassthrough, RuleMatcher: bus.MatcherNone}); !strings.Contains(reason, "only for read_only or idempotent") {
		t.Fatalf("a write tool with cache_ttl_ms: %q", reason)
	}
}

// cachedEntry returns once the result cache holds an entry of tool, seen
// by a watch of its bucket (which delivers what is stored, then each write).
func cachedEntry(t *testing.T, d *xtest.Deployment, tool string) {
	t.Helper()
	_, js := clientJS(t, d)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, d.Subjects().Bucket(rcache.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, tool+".*", jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				t.Fatalf("the watch of %s's cached entries ended", tool)
			}
			if e != nil {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no cached entry of %s: %v", tool, ctx.Err())
		}
	}
}

// TestAuditEveryPath: each decision path leaves exactly one audit record
// with its behavior; a confirmed call names its approver; a configured
// secret never appears; the export filters by session, tool and time.
func TestAuditEveryPath(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{
		Groups: []bus.Group{{Name: "weather", Description: "Weather.", Scope: bus.ScopeMeta}},
		Guard: router.Guard{Cache: true, Audit: &audit.Config{Inputs: true, Redact: []string{"password"}},
			Limits: limits.Policy{Rules: []limits.Rule{{Name: "one-paid", Tools: []string{"paid"}, Budget: &limits.Budget{Units: 1}}}}}}})
	type in struct {
		City     string `json:"city,omitempty"`
		Password string `json:"password,omitempty"`
	}
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		run := func(context.Context, *worker.Call, in) (string, error) { return "ok", nil }
		for _, def := range []bus.ToolDef{
			{Name: "paid", Description: "Paid.", ReadOnly: true},
			{Name: "lookup", Description: "Look up.", ReadOnly: true, CacheTTLMS: 3600_000},
			{Name: "deploy", Description: "Deploy."},
			{Name: "ext", Description: "Asks a person.", External: true, ReadOnly: true},
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
	if err := d.WaitLive(t.Context(), "paid", "lookup", "deploy", "ext"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, d)
	nc, js := clientJS(t, d)
	approver := client.New(nc, client.Config{Source: "test/approver-carol"})
	call := func(session, reply string, calls ...bus.Call) *bus.Reply {
		t.Helper()
		r, err := c.Call(t.Context(), session, bus.Batch{User: json.RawMessage(`"alice"`), Calls: calls}, client.WithReplyID(reply))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	since := time.Now().Add(-time.Second)
	call("s1", "r1",
		bus.Call{ID: "allow", Name: "paid", Input: json.RawMessage(`{"password":"hunter2"}`)},
		bus.Call{ID: "limit", Name: "paid"},
		bus.Call{ID: "unknown", Name: "nope"},
		bus.Call{ID: "invalid", Name: "lookup", Input: json.RawMessage(`{"city":5}`)},
		bus.Call{ID: "miss", Name: "lookup", Input: json.RawMessage(`{"city":"Oslo"}`)},
		bus.Call{ID: "reset", Name: "reset_tools", Input: json.RawMessage(`{"weather":true}`)},
	)
	call("s1", "r2", bus.Call{ID: "hit", Name: "lookup", Input: json.RawMessage(`{"city":"Oslo"}`)})
	r := call("s1", "r3", bus.Call{ID: "ask", Name: "deploy"}, bus.Call{ID: "ext", Name: "ext"})
	if len(r.Parked) != 2 {
		t.Fatalf("parked %+v", r.Parked)
	}
	yes := true
	if err := approver.Parked().Confirm(t.Context(), "deploy", "s1", "r3", "ask", bus.Answer{Confirmed: &yes}); err != nil {
		t.Fatal(err)
	}
	// ext parks once deploy's run is over (deploy is not concurrency-safe).
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		return approver.Parked().Answer(t.Context(), "ext", "s1", "r3", "ext", bus.Answer{State: bus.StateSuccess, Output: bus.Text("done")})
	})
	if err := c.Admin(t.Context(), "session.mode", "s2", map[string]string{"mode": "explore"}, nil); err != nil {
		t.Fatal(err)
	}
	call("s2", "r1", bus.Call{ID: "deny", Name: "deploy"})
	call("s1", "r1", bus.Call{ID: "allow", Name: "paid", Input: json.RawMessage(`{"password":"hunter2"}`)}) // re-sent: recorded once

	want := map[string]string{"s1/allow": audit.Allow, "s1/limit": audit.Limit, "s1/unknown": audit.Unresolved, "s1/invalid": audit.Invalid,
		"s1/miss": audit.Allow, "s1/reset": audit.Builtin, "s1/hit": audit.Allow, "s1/ask": audit.Ask, "s1/ext": audit.External, "s2/deny": audit.Deny}
	export := func(f audit.Filter) []audit.Record {
		var out []audit.Record
		err := audit.Export(t.Context(), js, d.Subjects(), f, func(raw json.RawMessage) error {
			if strings.Contains(string(raw), "hunter2") {
				t.Errorf("a secret in the audit trail: %s", raw)
			}
			var rec audit.Record
			if err := json.Unmarshal(raw, &rec); err != nil {
				return err
			}
			out = append(out, rec)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var recs []audit.Record
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if recs = export(audit.Filter{Since: since}); len(recs) < len(want) {
			return fmt.Errorf("%d records of %d", len(recs), len(want))
		}
		return nil
	})
	seen := map[string]audit.Record{}
	for _, rec := range recs {
		k := rec.Session + "/" + rec.CallID
		if _, dup := seen[k]; dup {
			t.Errorf("two records of %s", k)
		}
		seen[k] = rec
		if want[k] == "" || rec.Decision.Behavior != want[k] {
			t.Errorf("%s: behavior %q, want %q (%+v)", k, rec.Decision.Behavior, want[k], rec)
		}
		if rec.InputDigest == "" || rec.User != "alice" || rec.Decision.Mode == "" {
			t.Errorf("%s: %+v", k, rec)
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("records of %d calls, want %d", len(seen), len(want))
	}
	if a := seen["s1/ask"]; !strings.Contains(a.Decision.Approver, "test/approver-carol") || a.Decision.AnsweredAt.IsZero() || a.Outcome.State != bus.StateSuccess {
		t.Errorf("confirmed call: %+v", a)
	}
	if a := seen["s1/limit"]; a.Decision.Rule != "one-paid" || a.Outcome.Code != bus.CodeLimitExceeded {
		t.Errorf("limited call: %+v", a)
	}
	if !seen["s1/hit"].Decision.Cached || seen["s1/miss"].Decision.Cached {
		t.Errorf("cache marks: hit %+v miss %+v", seen["s1/hit"], seen["s1/miss"])
	}
	if in := string(seen["s1/allow"].Input); !strings.Contains(in, "[redacted]") {
		t.Errorf("input %s", in)
	}
	if got := export(audit.Filter{Session: "s2"}); len(got) != 1 || got[0].CallID != "deny" {
		t.Errorf("--session s2: %+v", got)
	}
	if got := export(audit.Filter{Tool: "lookup"}); len(got) != 3 {
		t.Errorf("--tool lookup: %d records", len(got))
	}
	if got := export(audit.Filter{Since: time.Now().Add(time.Hour)}); len(got) != 0 {
		t.Errorf("--since the future: %d records", len(got))
	}
}

// TestLimitResentBatchCountedOnce: a re-sent batch (same reply id) gets
// the first copy's result from the ledger, not limit_exceeded: its call
// was counted once.
func TestLimitResentBatchCountedOnce(t *testing.T) {
	d, runs := guardDeployment(t, false, 1, router.Guard{Limits: limits.Policy{Rules: []limits.Rule{
		{Name: "writes", Writes: true, Rate: &limits.Rate{Calls: 1, IntervalMS: 3600_000}}}}})
	c := newClient(t, d)
	for i := range 2 {
		reply, err := c.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "w", Name: "deploy"}}}, client.WithReplyID("same"))
		if err != nil || reply.Results[0].State != bus.StateSuccess {
			t.Fatalf("copy %d: %+v %v", i, reply, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
	reply, err := c.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "w", Name: "deploy"}}}, client.WithReplyID("next"))
	if err != nil || reply.Results[0].Error == nil || reply.Results[0].Error.Code != bus.CodeLimitExceeded {
		t.Fatalf("a new batch: %+v %v", reply, err)
	}
}
