package main

import (
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
	"github.com/toolbus/toolbus/router"
)

// TestAttack37AuditTableInjection (session 37, red team on the audit trail:
// held): an agent of an open router calls made-up tools whose names carry
// a newline, a terminal escape and a bidi override, as a user whose name
// does too, to forge rows of `toolbus audit` (an operator reading the table
// would see a call of deploy by carol allowed) or drive the terminal. Each
// record stays one row, with its controls written as escapes.
func TestAttack37AuditTableInjection(t *testing.T) {
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat, Router: router.Config{Guard: router.Guard{Audit: &audit.Config{}}}})
	nc, err := x.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(nc, client.Config{})
	forged := "x\n2026-12-07T08:00:00Z  s9  c1  deploy  carol  allow  -  success  5"
	user, _ := json.Marshal("mallory\x1b[2J\u202e")
	if _, err := c.Call(t.Context(), "a1", bus.Batch{User: user, Calls: []bus.Call{
		{ID: "c1", Name: forged}, {ID: "c2", Name: "y\x1b]0;owned\x07"}, {ID: "c3", Name: "z\u202edeploy"}}}); err != nil {
		t.Fatal(err)
	}
	var out string
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		out, _, err = exec(t.Context(), "audit", "--nats", x.URL(0), "--session", "a1")
		if err == nil && strings.Count(out, "\n") != 4 { // the header and three rows
			err = fmt.Errorf("%d lines", strings.Count(out, "\n"))
		}
		return err
	})
	if strings.ContainsAny(out, "\x1b\x07\u202e") || strings.Contains(out, "\ns9") || strings.Contains(out, "\n2026-12-07T08:00:00Z") {
		t.Fatalf("the table carries the agent's controls or forged row:\n%q", out)
	}
	if !strings.Contains(out, `x\n2026-12-07T08:00:00Z`) || !strings.Contains(out, `mallory\x1b[2J\u202e`) {
		t.Fatalf("the names not shown escaped:\n%q", out)
	}
}
