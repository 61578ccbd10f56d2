package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestBuiltinAnswersOnAnOpenRouter: the built-in worker of a router with
// its default inbox prefix (_INBOX.router, whose reply subjects the router
// never answers) is registered and answers at once: one call, no retry.
func TestBuiltinAnswersOnAnOpenRouter(t *testing.T) {
	m, stderr := startRun(t, []string{"--listen", "127.0.0.1:-1", "--data", filepath.Join(t.TempDir(), "data"), "--heartbeat", "500ms"},
		regexp.MustCompile(`serving prefix "toolbus" on (\S+)`))
	nc, err := nats.Connect(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reply, err := client.New(nc, client.Config{}).Call(ctx, "s1",
		bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := reply.Results[0]; r.State != bus.StateSuccess || r.Output[0].Text != "hi" {
		t.Fatalf("echo = %+v\n%s", r, stderr.String())
	}
}
