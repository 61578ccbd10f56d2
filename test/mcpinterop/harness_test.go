// Package mcpinterop runs MCP clients nobody on toolbus wrote (the Go SDK,
// the TypeScript SDK, the MCP Inspector CLI, supergateway) against the
// real facade: a router, a worker and the facade on an in-process
// nats-server with JetStream, the facade served over streamable HTTP with
// a bearer token, as `router --mcp-listen ... --mcp-tokens ...
// --mcp-confirm host_user` serves it (docs/mcp.md, "Interop").
package mcpinterop

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/mcp/mcptest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// bound limits every wait of these tests (generous: CI is a loaded
// 2-core machine).
const bound = 30 * time.Second

// token is alice's bearer token; the facade holds only its digest.
const token = "interop-token-of-alice-0001"

// env is a running deployment with the facade over HTTP.
type env struct {
	d   *xtest.Deployment
	bus *client.Client
	// base is the facade's address (http://127.0.0.1:port); a session's
	// URL is base + "/mcp/" + session (README, "Use toolbus from an MCP
	// host").
	base string
	// started receives the id of each call of the tool "wait" when it
	// starts; ended receives why it ended (its context's error, or
	// "released").
	started chan string
	ended   chan string
	// f is the facade (ServeStdio serves `toolbus mcp`).
	f *facade.Facade
	// release, closed, ends every wait call with the text "released".
	release chan struct{}
	// cfg is the facade's Config (another facade process is made with it).
	cfg facade.Config
}

// url is the session's URL as the README gives it to most clients.
func (e *env) url(session string) string { return e.base + "/mcp/" + session }

type helloIn struct {
	Name string `json:"name"`
}

// statsOut is what the tool stats returns: the worker sends it as JSON
// text, and the tool lists an output_schema.
type statsOut struct {
	N int `json:"n"`
}

// basicTools is what a new session lists.
var basicTools = []string{"ask_human", "hello", "reset_tools", "stats", "wait"}

// opsTools is what a session lists after reset_tools {"ops": true}.
var opsTools = []string{"ask_human", "deploy", "hello", "reset_tools", "stats", "wait"}

// newEnv starts a router, a worker with the tools hello (read-only),
// stats (read-only, with an output schema),
// wait (read-only; runs until its call is cancelled or release is closed), deploy (ask:
// confirmed in sessions whose mode is "default"), siteops (group
// "site", which an operator activates) and ask_human (external: it
// parks until answered on the bus), and the facade with alice's token
// for every session, confirm policy host_user.
func newEnv(t *testing.T) *env { return startEnv(t, nil) }

// startEnv is newEnv with the facade's Config changed by mod first.
func startEnv(t *testing.T, mod func(*facade.Config)) *env {
	return startEnvWith(t, router.Guard{}, mod)
}

// startEnvWith is startEnv with the router's Guard.
func startEnvWith(t *testing.T, guard router.Guard, mod func(*facade.Config)) *env {
	t.Helper()
	e := &env{started: make(chan string, 16), ended: make(chan string, 16), release: make(chan struct{})}
	e.d = xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: 2 * time.Second, Bound: bound,
		Router: router.Config{DefaultMode: "bypass", Logger: slog.New(slog.DiscardHandler), Guard: guard,
			Groups: []bus.Group{{Name: "ops", Description: "Operations.", Scope: bus.ScopeMeta},
				{Name: "site", Description: "Site tools an operator switches.", Scope: bus.ScopeExternal}}}})
	setup := func(w *worker.Worker) error {
		return errors.Join(
			worker.Register(w, bus.ToolDef{Name: "hello", Description: "Greets.", ReadOnly: true,
				InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)},
				func(_ context.Context, _ *worker.Call, in helloIn) (string, error) { return "hello " + in.Name, nil }),
			worker.Register(w, bus.ToolDef{Name: "stats", Description: "Counts; its output is a JSON object.", ReadOnly: true,
				OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)},
				func(context.Context, *worker.Call, struct{}) (statsOut, error) { return statsOut{N: 3}, nil }),
			worker.Register(w, bus.ToolDef{Name: "wait", Description: "Runs until cancelled.", ReadOnly: true},
				func(ctx context.Context, c *worker.Call, _ struct{}) (string, error) {
					e.started <- c.ID
					select {
					case <-ctx.Done():
						e.ended <- ctx.Err().Error()
						return "", ctx.Err()
					case <-e.release:
						return "released", nil
					}
				}),
			worker.Register(w, bus.ToolDef{Name: "deploy", Description: "Deploys.", Groups: []string{"ops"}},
				func(context.Context, *worker.Call, struct{}) (string, error) { return "deployed", nil }),
			w.Handle(bus.ToolDef{Name: "ask_human", Description: "A person answers.", External: true, ReadOnly: true,
				InputSchema: json.RawMessage(`{"type":"object"}`)}, nil),
			worker.Register(w, bus.ToolDef{Name: "siteops", Description: "Site operations.", ReadOnly: true, Groups: []string{"site"}},
				func(context.Context, *worker.Call, struct{}) (string, error) { return "site", nil }))
	}
	if _, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: setup}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.WaitLive(t.Context(), "hello", "stats", "wait", "deploy", "siteops", "ask_human"); err != nil {
		t.Fatal(err)
	}
	e.bus = client.New(e.conn(t, xtest.RoleClient), client.Config{Source: "test/agent"})
	tokenFile := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokenFile, []byte("tokens:\n- {name: alice, token: "+facade.HashToken(token)+
		", user: alice, sessions: [\"*\"], confirm: host_user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := facade.LoadTokens(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	// Poll once an hour: every list change these clients see comes from
	// a watch, as in a deployment (the poll is only the fallback).
	// QuietHold (a parked call of a host without progress token or
	// task answered "still parked") is 3 s instead of 45 s, and progress
	// notices come every 200 ms.
	cfg := facade.Config{Auth: tokens, Poll: time.Hour, Confirm: facade.ConfirmHostUser, QuietHold: 3 * time.Second,
		ProgressEvery: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	e.cfg = cfg
	f := facade.New(client.New(e.conn(t, "facade"), client.Config{Source: "toolbus/mcp"}), cfg)
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(func() { hs.Close(); f.Drain(testkit.StopContext(t)) })
	e.base, e.f = hs.URL, f
	return e
}

func (e *env) conn(t *testing.T, role string) *nats.Conn {
	t.Helper()
	nc, err := e.d.Connect(t.Context(), role)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// bridge bridges srv onto the bus (cfg: the bridge's Config), stops it
// when t ends, and waits until tool is live.
func (e *env) bridge(t *testing.T, srv bridge.Server, cfg bridge.Config, tool string) {
	t.Helper()
	b, err := bridge.New(e.conn(t, "bridge"), &bridge.File{Servers: []bridge.Server{srv}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	if err := e.d.WaitLive(t.Context(), tool); err != nil {
		t.Fatal(err)
	}
}

// askMode makes session s confirm what is not allowed (mode "default")
// and activates the group ops, so deploy is listed and asks.
func (e *env) askMode(t *testing.T, s string) {
	t.Helper()
	if err := e.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	e.resetTools(t, s, map[string]bool{"ops": true})
}

// resetTools runs reset_tools in session s through the bus.
func (e *env) resetTools(t *testing.T, s string, groups map[string]bool) {
	t.Helper()
	if _, err := e.bus.Call(t.Context(), s, bus.Batch{Calls: []bus.Call{{ID: "r-" + nuid.Next(), Name: "reset_tools", Input: client.Input(groups)}}}); err != nil {
		t.Fatal(err)
	}
}

// activate is an operator's `toolbus activate <group>` in session s.
func (e *env) activate(t *testing.T, s, group string) {
	t.Helper()
	if err := e.bus.Admin(t.Context(), "session.activate", s, map[string]any{"groups": []string{group}}, nil); err != nil {
		t.Fatal(err)
	}
}

// parkedEvent is mcptest.ParkedEvent within bound.
func parkedEvent(t *testing.T, ev *client.Events, tool string) (replyID string, p bus.Parked) {
	t.Helper()
	return mcptest.ParkedEvent(t, ev, tool, bound)
}
