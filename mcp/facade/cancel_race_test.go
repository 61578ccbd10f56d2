package facade

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// TestCancelInterruptsBusCall: every MCP call cancelled by its client
// interrupts its bus call. When the client cancels, the request's context
// ends, and the bus call's client.Call returns with that context's error
// and the session's event watch closes at about the same moment; the wait
// loop used to pick one of those (a select between ready cases picks any)
// and return without cancelling on the bus, so about one cancelled call in thirty ran on
// until its deadline (found by test/mcpinterop with the Go SDK and
// mcp-go). Repeated, so that the race shows.
func TestCancelInterruptsBusCall(t *testing.T) {
	e := newEnv(t)
	started, ended := make(chan string, 1), make(chan string, 1)
	if _, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "block", Description: "Runs until cancelled.", ReadOnly: true},
			func(ctx context.Context, c *worker.Call, _ struct{}) (string, error) {
				started <- c.ID
				<-ctx.Done()
				ended <- c.ID
				return "", ctx.Err()
			})
	}}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.WaitLive(t.Context(), "block"); err != nil {
		t.Fatal(err)
	}
	for _, version := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		t.Run(version, func(t *testing.T) {
			c := e.connect(t, "cancelrace"+strings.ReplaceAll(version, "-", ""), version, "alice")
			for i := range 40 {
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() {
					req := mcp.CallToolRequest{}
					req.Params.Name, req.Params.Arguments = "block", map[string]any{}
					_, err := c.CallTool(ctx, req)
					done <- err
				}()
				id := testkit.Recv(t, started, bound, "the call at the worker")
				cancel()
				if err := testkit.Recv(t, done, bound, "the cancelled tools/call"); !errors.Is(err, context.Canceled) {
					t.Fatalf("call %d: %v", i, err)
				}
				if got := testkit.Recv(t, ended, bound, "the bus call's cancellation"); got != id {
					t.Fatalf("call %d: ended %s, want %s", i, got, id)
				}
			}
		})
	}
}
