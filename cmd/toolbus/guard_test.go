package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestLimitsAndAuditCommands: `toolbus limits` shows what a budget used
// and has left, --reset clears it; `toolbus audit --json` exports the
// calls as JSON lines, filtered by session and tool.
func TestLimitsAndAuditCommands(t *testing.T) {
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat, Router: router.Config{Guard: router.Guard{
		Audit:  &audit.Config{},
		Limits: limits.Policy{Rules: []limits.Rule{{Name: "echo-daily", Tools: []string{"echo"}, Per: []string{limits.PerUser}, Budget: &limits.Budget{Units: 3}}}}}}})
	_, err := x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "echo", Description: "Echo.", ReadOnly: true},
			func(_ context.Context, _ *worker.Call, in struct{ Text string }) (string, error) { return in.Text, nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.WaitLive(t.Context(), "echo"); err != nil {
		t.Fatal(err)
	}
	nc, err := x.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(nc, client.Config{})
	for i, session := range []string{"a1", "a1", "b1"} {
		if _, err := c.Call(t.Context(), session, bus.Batch{User: json.RawMessage(`"alice"`), Calls: []bus.Call{{ID: fmt.Sprintf("c%d", i), Name: "echo", Input: json.RawMessage(`{"Text":"hi"}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	url := x.URL(0)
	out, _, err := exec(t.Context(), "limits", "--nats", url, "--tool", "echo", "--user", "alice")
	if err != nil || !strings.Contains(out, "echo-daily") || !strings.Contains(out, "user=alice") || !regexpFields(out, "3", "0", "3") {
		t.Fatalf("limits: %v\n%s", err, out)
	}
	if out, _, err := exec(t.Context(), "limits", "--nats", url, "--tool", "echo", "--user", "alice", "--reset"); err != nil || !strings.Contains(out, "reset 1") {
		t.Fatalf("limits --reset: %v\n%s", err, out)
	}
	if _, err := c.Call(t.Context(), "b1", bus.Batch{User: json.RawMessage(`"bob"`), Calls: []bus.Call{{ID: "c3", Name: "echo", Input: json.RawMessage(`{"Text":"hi"}`)}}}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		out, _, err := exec(t.Context(), "audit", "--nats", url, "--json", "--session", "a1", "--tool", "echo")
		if err != nil {
			return err
		}
		lines = strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			return fmt.Errorf("%d lines:\n%s", len(lines), out)
		}
		return nil
	})
	for _, l := range lines {
		var r audit.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Session != "a1" || r.Tool != "echo" || r.Decision.Behavior != audit.Allow {
			t.Fatalf("line %s: %v", l, err)
		}
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if out, _, err := exec(t.Context(), "audit", "--nats", url, "--since", "1h"); err != nil || strings.Count(out, "echo") != 4 {
			return fmt.Errorf("audit table: %v\n%s", err, out)
		}
		return nil
	})
	// --user is the toolbus user, and audit filters by it.
	if out, _, err := exec(t.Context(), "audit", "--nats", url, "--user", "alice"); err != nil || strings.Count(out, "echo") != 3 || strings.Contains(out, "bob") {
		t.Fatalf("audit --user alice: %v\n%s", err, out)
	}
	if out, _, err := exec(t.Context(), "audit", "--nats", url, "--json", "--user", "bob"); err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"user":"bob"`) {
		t.Fatalf("audit --json --user bob: %v\n%s", err, out)
	}
}

// regexpFields reports whether some line of a table holds the fields in
// order (used, left, limit).
func regexpFields(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[3] == fields[0] && f[4] == fields[1] && f[5] == fields[2] {
			return true
		}
	}
	return false
}
