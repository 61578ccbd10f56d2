package mcpinterop

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestGoSDKStdio: the Go SDK as a desktop host of the stdio facade (what
// `toolbus mcp --session S --user U` serves, here through
// Facade.ServeStdio over pipes) at 2025-11-25: list, call, a call
// cancelled through its context (notifications/cancelled over stdio)
// and another call after it, and a confirmation the host's user allows
// through elicitation. No tasks are offered over stdio (docs/mcp.md).
func TestGoSDKStdio(t *testing.T) {
	e := newEnv(t)
	const s = "desktop1"
	e.askMode(t, s)
	hostIn, facadeOut := io.Pipe()
	facadeIn, hostOut := io.Pipe()
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- e.f.ServeStdio(ctx, s, "alice", facadeIn, facadeOut) }()
	t.Cleanup(func() {
		stop()
		_ = hostOut.Close()
		_ = facadeOut.Close()
		<-served
	})
	h := &goHost{changed: make(chan struct{}, 16), asked: make(chan string, 16), decision: "allow"}
	c := mcp.NewClient(&mcp.Implementation{Name: "toolbus-interop-go-stdio", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			h.asked <- req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow"}}, nil
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.IOTransport{Reader: hostIn, Writer: hostOut}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != "2025-11-25" {
		t.Fatalf("negotiated %s", got)
	}
	h.ClientSession = cs
	if got := h.names(t); !slices.Equal(got, opsTools) {
		t.Fatalf("tools/list: %v", got)
	}
	if text, isErr := h.call(t, "hello", map[string]any{"name": "desktop"}); isErr || text != "hello desktop" {
		t.Fatalf("hello: %q %v", text, isErr)
	}
	cctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{}})
		done <- err
	}()
	testkit.Recv(t, e.started, bound, "the wait call at the worker")
	cancel()
	if err := testkit.Recv(t, done, bound, "the cancelled tools/call"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if why := testkit.Recv(t, e.ended, bound, "the bus call's cancellation at the worker"); why != context.Canceled.Error() {
		t.Fatalf("the worker's call ended with %q", why)
	}
	if text, isErr := h.call(t, "hello", map[string]any{"name": "again"}); isErr || text != "hello again" {
		t.Fatalf("hello after the cancel: %q %v", text, isErr)
	}
	if text, isErr := h.call(t, "deploy", map[string]any{}); isErr || text != "deployed" {
		t.Fatalf("deploy allowed by the host's user: %q %v", text, isErr)
	}
	if msg := testkit.Recv(t, h.asked, bound, "the elicitation"); !strings.Contains(msg, "deploy") {
		t.Fatalf("elicitation message %q", msg)
	}
}
