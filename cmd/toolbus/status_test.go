package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

func TestStatus(t *testing.T) {
	d := newDeployment(t)
	// A session stored in KV counts, whichever router holds it.
	if _, _, err := exec(t.Context(), "session", "mode", "explore", "--session", "st1", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	// A worker that answers no micro discovery, as the Python and Java SDKs' do: listed by the id of its beats.
	d.registerDefs(t, bus.ToolDef{Name: "py_add", Description: "Add, in Python."})
	// A call, which the worker's micro STATS count, shown beside it under the tool (session 40).
	if _, _, err := exec(t.Context(), "call", "get_current_time", `{"timezone":"UTC"}`, "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	out, _, err := exec(t.Context(), "status", "--wait", "2s", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"get_current_time", "1 live workers", "router ", "worker ", "store: ok", "groups: basic", "1 stored",
		"py_add", "\n    registrar ", " no discovery (its beats only: a Python or Java worker", "discovery: 4 endpoints (instances below)\n",
		" 1 requests, 0 errors, average run "} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not listed above") {
		t.Errorf("status says a worker the router named is unlisted:\n%s", out)
	}
	out, _, err = exec(t.Context(), "status", "--json", "--wait", "2s", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Status    bus.Status     `json:"status"`
		Instances []instance     `json:"instances"`
		Unlisted  map[string]int `json:"unlisted"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	py := slices.IndexFunc(v.Status.Tools, func(t bus.ToolStatus) bool { return t.Name == "py_add" })
	if len(v.Instances) < 2 || py < 0 || !slices.Equal(v.Status.Tools[py].Workers, []string{"registrar"}) || v.Unlisted != nil {
		t.Fatalf("status %+v", v)
	}
	if !slices.ContainsFunc(v.Instances, func(it instance) bool {
		st := it.Stats["get_current_time"]
		return it.Kind == "worker" && st.Requests == 1 && st.Errors == 0 && st.AverageMS > 0
	}) {
		t.Fatalf("no worker's stats count the call: %+v", v.Instances)
	}
	if _, _, err := exec(t.Context(), "status", "extra", "--nats", d.url); err == nil {
		t.Fatal("status with an argument succeeded")
	}
}

// TestStatusOlderRouter: a router before protocol 1.29 names no worker;
// status then counts those discovery did not list, as before. A router of
// 1.29 that names fewer than it counts (its reply's bound): the rest are
// counted under the tool, and no unlisted line.
func TestStatusOlderRouter(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	var tools atomic.Pointer[string] // the fake router's tools
	tools.Store(new(`[{"name":"py_add","live_workers":1,"external":false}]`))
	sub, err := nc.Subscribe(bus.NewSubjects("").Admin("status"), func(m *nats.Msg) {
		e, err := bus.NewEvent(bus.TypeAdminReply, "toolbus/router/old", json.RawMessage(`{"router":"old","tools":`+*tools.Load()+`,"groups":0,"sessions":0,"parked":0,"store":{"state":"ok"}}`))
		var r *nats.Msg
		if err == nil {
			r, err = e.Msg(m.Reply)
		}
		if err == nil {
			err = nc.PublishMsg(r)
		}
		if err != nil {
			t.Error(err)
		}
	})
	if err == nil {
		err = nc.Flush() // the server has the subscription
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	status := func(want, json string) {
		t.Helper()
		out, _, err := exec(t.Context(), "status", "--wait", "100ms", "--nats", s.ClientURL())
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("%v\n%s", err, out)
		}
		out, _, err = exec(t.Context(), "status", "--json", "--wait", "100ms", "--nats", s.ClientURL())
		if err != nil || strings.Contains(out, `"unlisted"`) != (json != "") || !strings.Contains(out, json) {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	status("live workers not listed above: 1 of py_add (", `"unlisted":{"py_add":1}`)
	// Whoever may answer discovery answers as many times as it likes:
	// status's discovery keeps maxInstances of them (session 40) and stops
	// there. Its window here is a minute: `status --wait 2s` kept 571 of
	// the 1,124 under -race at load 22 (a wall-time window; the count, not
	// the window, ends a passing run).
	stats, err := nc.Subscribe("$SRV.STATS.toolbus-worker", func(m *nats.Msg) {
		for i := range maxInstances + 100 {
			_ = m.Respond(fmt.Appendf(nil, `{"name":"toolbus-worker","id":"w%d","metadata":{"worker":"w%d"},"endpoints":[{"name":"py_add","num_requests":2}]}`, i, i))
		}
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Unsubscribe()
	kept, err := discover(t.Context(), testkit.Connect(t, s), "toolbus-worker", time.Minute)
	if err != nil || len(kept) != maxInstances || len(kept[0].Endpoints) != 1 || kept[0].Endpoints[0].NumRequests != 2 {
		t.Fatalf("%d instances kept (%v), want %d with their stats", len(kept), err, maxInstances)
	}
	tools.Store(new(`[{"name":"py_add","live_workers":3,"external":false,"workers":["py-1"]}]`))
	status("    2 more   (the router's reply names at most 64 a tool", "")
}

func TestStoreLine(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 41, 34, 0, time.UTC)
	for _, tc := range []struct {
		in   bus.StoreStatus
		want string
	}{
		{bus.StoreStatus{State: "ok"}, "store: ok"},
		{bus.StoreStatus{State: "full", Error: "insufficient resources", Since: &since}, "store: full (JetStream: insufficient resources) since 2026-12-01T10:41:34Z"},
		{bus.StoreStatus{}, "store: unknown (the router does not report it)"},
	} {
		if got := storeLine(tc.in); got != tc.want {
			t.Errorf("storeLine(%+v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "extra"},
		{"bench", "--runs", "-2"},             // bad values
		{"bench", "--duration", "-1s"},        // likewise
		{"bench", "--cross-process", "extra"}, // no arguments either
	} {
		if _, _, err := exec(t.Context(), args...); err == nil {
			t.Errorf("%v succeeded", args)
		}
	}
}

// TestStatusWarnsUnknownNames: pinned tools and groups, quota rules'
// tools and tools' groups that name nothing are listed by status, and a
// name that becomes known drops out.
func TestStatusWarnsUnknownNames(t *testing.T) {
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat, Router: router.Config{
		Groups: []bus.Group{{Name: "ops", Description: "Ops.", Scope: bus.ScopeMeta}},
		Guard: router.Guard{Search: true,
			Pinned: groups.Pins{Tools: []string{"get_current_time", "get_curent_time"}, Groups: []string{"ops", "opz", bus.GroupBasic}},
			Limits: limits.Policy{Rules: []limits.Rule{{Name: "paid", Tools: []string{"web_search", "echo"}, Budget: &limits.Budget{Units: 10}}}}}}})
	_, err := x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		if err := builtin.RegisterWith(t.Context(), w, builtin.Config{}); err != nil {
			return err
		}
		return worker.Register(w, bus.ToolDef{Name: "lost", Description: "In a group nobody defined.", ReadOnly: true, Groups: []string{"nowhere"}},
			func(context.Context, *worker.Call, struct{}) (string, error) { return "", nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.WaitLive(t.Context(), "get_current_time", "echo", "lost"); err != nil {
		t.Fatal(err)
	}
	out, _, err := exec(t.Context(), "status", "--wait", "100ms", "--nats", x.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"warning: search.pinned.tools: get_curent_time is not a registered tool\n",
		"warning: search.pinned.groups: opz is not a defined group\n",
		"warning: quotas rule paid: web_search is not a registered tool\n",
		"warning: group nowhere (of tool lost) is not defined: its tools are never visible\n",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("status lacks %q:\n%s", w, out)
		}
	}
	if n := strings.Count(out, "warning:"); n != len(want) {
		t.Errorf("%d warnings, want %d:\n%s", n, len(want), out)
	}
}

func TestBoundLines(t *testing.T) {
	now := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	recent, old := now.Add(-10*time.Second), now.Add(-time.Hour)
	for _, tc := range []struct {
		name string
		in   bus.BoundStatus
		want []string
	}{
		{"ok", bus.BoundStatus{Bucket: "parked", Bytes: 1 << 20, Bound: 512 << 20},
			[]string{"  parked: 1.0 MiB of 512.0 MiB (0%)"}},
		{"near", bus.BoundStatus{Bucket: "ledger", Bytes: 470 << 20, Bound: 512 << 20},
			[]string{"  ledger: 470.0 MiB of 512.0 MiB (92%)", "warning: ledger is near its bound (92%): new keys are refused at it (docs/operations.md)"}},
		{"refusing below 90%", bus.BoundStatus{Bucket: "sessions", Bytes: 1 << 20, Bound: 2 << 20, Refused: 3, LastRefused: &recent},
			[]string{"  sessions: 1.0 MiB of 2.0 MiB (50%), 3 new keys refused since the router started",
				"warning: sessions refuses new keys at its bound (the last at 2026-12-07T01:59:50Z): its calls or sessions end limit_exceeded (docs/operations.md)"}},
		{"refused long ago", bus.BoundStatus{Bucket: "sessions", Bytes: 1 << 20, Bound: 2 << 20, Refused: 1, LastRefused: &old},
			[]string{"  sessions: 1.0 MiB of 2.0 MiB (50%), 1 new keys refused since the router started"}},
		{"cache: drops its oldest, never warned", bus.BoundStatus{Bucket: "cache", Bytes: 256 << 20, Bound: 256 << 20, DropsOldest: true},
			[]string{"  cache: 256.0 MiB of 256.0 MiB (100%), its oldest entries dropped past it (nothing refused)"}},
		{"mcp, its facade's refusals (bounds37)", bus.BoundStatus{Bucket: "mcp", Bytes: 240 << 20, Bound: 256 << 20, Refused: 2, LastRefused: &recent},
			[]string{"  mcp: 240.0 MiB of 256.0 MiB (94%), 2 new keys refused since the router started",
				"warning: mcp refuses new keys at its bound (the last at 2026-12-07T01:59:50Z): its calls or sessions end limit_exceeded (docs/operations.md)"}},
	} {
		if got := boundLines([]bus.BoundStatus{tc.in}, now); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestStatusBounds: a small soft bound on P_sessions, sessions made until
// one is refused: the router's toolbus_store_refused_total counts it, and
// status shows the bucket against its bound with the warning; --json
// carries the same. P_tasks and P_mcp (bounds36b) show with their bounds
// and the bytes written to them.
func TestStatusBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat,
		Router: router.Config{Metrics: reg, Store: store.Config{SessionsMaxBytes: 4 << 10, TasksMaxBytes: 1 << 20, MCPMaxBytes: 2 << 20}}})
	js := testkit.JetStream(t, testkit.ConnectURL(t, x.URL(0)))
	for _, b := range []string{"tasks", bus.BucketMCP} {
		kv, err := js.KeyValue(t.Context(), x.Subjects().Bucket(b))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(t.Context(), "k", make([]byte, 8<<10)); err != nil {
			t.Fatal(err)
		}
	}
	refused := false
	for i := 0; !refused; i++ {
		if i == 200 {
			t.Fatal("no session refused")
		}
		_, _, err := exec(t.Context(), "session", "mode", "explore", "--session", fmt.Sprintf("s%d", i), "--nats", x.URL(0))
		refused = err != nil && strings.Contains(err.Error(), bus.CodeLimitExceeded)
		if err != nil && !refused {
			t.Fatal(err)
		}
	}
	var got map[string]map[string]float64
	// The bytes written are read within a second (BoundEvery) of a scrape.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for start := time.Now(); got["tasks"]["toolbus_store_bytes"] < 8<<10 || got["mcp"]["toolbus_store_bytes"] < 8<<10; <-tick.C {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the bytes written are not shown: %v", got)
		}
		got = storeMetrics(t, reg)
	}
	if s := got[bus.BucketSessions]; s["toolbus_store_refused_total"] != 1 || s["toolbus_store_soft_bound_bytes"] != 4<<10 || s["toolbus_store_bytes"] == 0 {
		t.Fatalf("metrics of the sessions bucket: %v", got)
	}
	if got["tasks"]["toolbus_store_soft_bound_bytes"] != 1<<20 || got["mcp"]["toolbus_store_soft_bound_bytes"] != 2<<20 {
		t.Fatalf("the bounds of tasks and mcp: %v", got)
	}
	bs := statusBounds(t, x.URL(0), "  sessions: 0.0 MiB of 0.0 MiB (", "1 new keys refused since the router started", "warning: sessions refuses new keys at its bound", "  parked: ", "  ledger: ",
		"  tasks: 0.0 MiB of 1.0 MiB (", "  mcp: 0.0 MiB of 2.0 MiB (")
	if len(bs) != 5 || bs[1].Bucket != bus.BucketSessions || bs[1].Bound != 4<<10 || bs[1].Refused != 1 || bs[1].LastRefused == nil ||
		bs[3].Bucket != "tasks" || bs[3].Bound != 1<<20 || bs[3].Bytes < 8<<10 || bs[4].Bucket != bus.BucketMCP || bs[4].Bound != 2<<20 || bs[4].Bytes < 8<<10 {
		t.Fatalf("bounds %+v", bs)
	}
}

// statusBounds checks that toolbus status at url prints each of wants,
// and returns store.bounds of its --json.
func statusBounds(t *testing.T, url string, wants ...string) []bus.BoundStatus {
	t.Helper()
	out, _, err := exec(t.Context(), "status", "--wait", "100ms", "--nats", url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, _, err = exec(t.Context(), "status", "--json", "--wait", "100ms", "--nats", url)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Status bus.Status `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v.Status.Store.Bounds
}

// storeMetrics are reg's toolbus_store_* metrics: bucket → metric → value.
func storeMetrics(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && strings.HasPrefix(mf.GetName(), "toolbus_store_") {
				if got[l[0].GetValue()] == nil {
					got[l[0].GetValue()] = map[string]float64{}
				}
				got[l[0].GetValue()][mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return got
}

// TestStatusGuardBounds: with quotas and the result cache on, a rate per
// session under a 4 KiB quotas' state bound and a cached tool called from
// new sessions until a call is refused limit_exceeded: the router's
// metrics and status show limits (P_limits) with its refusal, budgets
// (P_LIMITS) and cache (P_rcache, 1 MiB) with the bytes the calls cached,
// dropping its oldest instead of a refused count (protocol 9, 1.27).
func TestStatusGuardBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat, Router: router.Config{Metrics: reg, Guard: router.Guard{Cache: true, CacheMaxBytes: 1 << 20,
		Limits: limits.Policy{MaxBytes: 4 << 10, Rules: []limits.Rule{{Name: "per-session", Per: []string{limits.PerSession}, Rate: &limits.Rate{Calls: 10, IntervalMS: 60_000}}}}}}})
	_, err := x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "lookup", Description: "Look up.", ReadOnly: true, CacheTTLMS: 3600_000},
			func(context.Context, *worker.Call, struct{}) (string, error) { return strings.Repeat("x", 512), nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.WaitLive(t.Context(), "lookup"); err != nil {
		t.Fatal(err)
	}
	refused := false
	for i := 0; !refused; i++ { // 256 bytes judged a new rate: about 16 sessions
		if i == 200 {
			t.Fatal("no call refused")
		}
		out, errOut, err := exec(t.Context(), "call", "lookup", "{}", "--session", fmt.Sprintf("s%d", i), "--nats", x.URL(0))
		refused = strings.Contains(out+errOut, bus.CodeLimitExceeded)
		if err != nil && !refused {
			t.Fatalf("%v\n%s%s", err, out, errOut)
		}
	}
	var got map[string]map[string]float64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for start := time.Now(); got["cache"]["toolbus_store_bytes"] < 512; <-tick.C { // read within a second of a scrape
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the cached bytes are not shown: %v", got)
		}
		got = storeMetrics(t, reg)
	}
	if l := got[limits.BucketRates]; l["toolbus_store_refused_total"] != 1 || l["toolbus_store_soft_bound_bytes"] != 4<<10 || l["toolbus_store_bytes"] == 0 {
		t.Fatalf("metrics of the quotas' state: %v", got)
	}
	if b, c := got["budgets"], got["cache"]; b["toolbus_store_soft_bound_bytes"] != 4<<10 || c["toolbus_store_soft_bound_bytes"] != 1<<20 {
		t.Fatalf("the bounds of budgets and cache: %v", got)
	} else if _, ok := c["toolbus_store_refused_total"]; ok {
		t.Fatalf("the cache refuses nothing, yet counts refusals: %v", c)
	}
	rows := map[string]bus.BoundStatus{}
	for _, b := range statusBounds(t, x.URL(0), "  limits: 0.0 MiB of 0.0 MiB (", "1 new keys refused since the router started", "warning: limits refuses new keys at its bound",
		"  budgets: 0.0 MiB of 0.0 MiB (0%)", "  cache: 0.0 MiB of 1.0 MiB (", "%), its oldest entries dropped past it (nothing refused)") {
		rows[b.Bucket] = b
	}
	if l, c := rows[limits.BucketRates], rows["cache"]; l.Bound != 4<<10 || l.Refused != 1 || l.LastRefused == nil || l.DropsOldest ||
		rows["budgets"].Bound != 4<<10 || c.Bound != 1<<20 || c.Bytes < 512 || !c.DropsOldest || c.Refused != 0 {
		t.Fatalf("bounds %+v", rows)
	}
}
