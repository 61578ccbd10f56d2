package facade

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestSearchToolsThroughFacade: with search on, the facade lists
// search_tools beside reset_tools, and a search with activate through MCP
// switches the group on: the host is told the list changed, and the found
// tool is listed and callable.
func TestSearchToolsThroughFacade(t *testing.T) {
	e := &env{release: make(chan struct{})}
	e.d = xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: 500 * time.Millisecond,
		Router: router.Config{DefaultMode: "bypass", Logger: slog.New(slog.DiscardHandler), Guard: router.Guard{Search: true},
			Groups: []bus.Group{{Name: "ops", Description: "Operations: deploy and roll back.", Scope: bus.ScopeMeta}}}})
	if _, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "deploy", Description: "Deploys a service.", Groups: []string{"ops"}},
			func(context.Context, *worker.Call, struct{}) (string, error) { return "deployed", nil })
	}}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.WaitLive(t.Context(), "deploy"); err != nil {
		t.Fatal(err)
	}
	e.f = New(client.New(e.conn(t, "facade"), client.Config{Source: "toolbus/mcp"}), Config{Poll: time.Hour, Insecure: true, Confirm: ConfirmHostUser})
	hs := httptest.NewServer(e.f.Handler())
	t.Cleanup(func() { hs.Close(); e.f.Drain(testkit.StopContext(t)) })
	e.url = hs.URL

	c := e.connect(t, "s1", mcp.ProtocolVersion20251125, "alice")
	got := names(t, c)
	if !slices.Contains(got, groups.SearchTools) || !slices.Contains(got, groups.ResetTools) || slices.Contains(got, "deploy") {
		t.Fatalf("listing %v", got)
	}
	res, err := call(t, c, groups.SearchTools, map[string]any{"query": "deploy a service", "activate": true}, false)
	if err != nil || res.IsError || !strings.Contains(textOf(res), "activated tool group(s): ops") {
		t.Fatalf("search: %+v %v", res, err)
	}
	waitChanged(t, c)
	if got := names(t, c); !slices.Contains(got, "deploy") {
		t.Fatalf("after the search: %v", got)
	}
	if res, err := call(t, c, "deploy", nil, false); err != nil || res.IsError || textOf(res) != "deployed" {
		t.Fatalf("deploy: %+v %v", res, err)
	}
}
