package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

func TestStatus(t *testing.T) {
	d := newDeployment(t)
	// A session stored in KV counts, whichever router holds it.
	if _, _, err := exec(t.Context(), "session", "mode", "explore", "--session", "st1", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	out, _, err := exec(t.Context(), "status", "--wait", "2s", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"get_current_time", "1 live workers", "router ", "worker ", "store: ok", "groups: basic", "1 stored"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = exec(t.Context(), "status", "--json", "--wait", "2s", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Status    bus.Status `json:"status"`
		Instances []instance `json:"instances"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(v.Status.Tools) == 0 || len(v.Instances) < 2 {
		t.Fatalf("status %+v", v)
	}
	if _, _, err := exec(t.Context(), "status", "extra", "--nats", d.url); err == nil {
		t.Fatal("status with an argument succeeded")
	}
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
		if err := builtin.RegisterWith(w, builtin.Config{}); err != nil {
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
