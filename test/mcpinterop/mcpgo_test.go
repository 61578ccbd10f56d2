package mcpinterop

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
)

// goElicitor is the mcp-go host's user: it allows every confirmation.
type goElicitor struct{ asked chan string }

func (el goElicitor) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	el.asked <- req.Params.Message
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"decision": "allow"}}}, nil
}

// TestMCPGo: mcp-go's client (the facade's own library, as another
// program would use it) at the README's URL with the bearer token, at
// 2025-11-25 and 2026-07-28: list, call, a call cancelled through its
// context and another call after it, and a confirmation the host's user
// allows through elicitation.
func TestMCPGo(t *testing.T) {
	e := newEnv(t)
	for _, version := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		t.Run(version, func(t *testing.T) {
			s := "mcpgo" + strings.ReplaceAll(version, "-", "")
			e.askMode(t, s)
			tr, err := transport.NewStreamableHTTP(e.url(s), transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}),
				transport.WithHTTPLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			el := goElicitor{asked: make(chan string, 4)}
			opts := []mcpclient.ClientOption{mcpclient.WithElicitationHandler(el)}
			if !mcp.IsModernProtocol(version) {
				opts = append(opts, mcpclient.WithLegacyProtocolOnly())
			}
			c := mcpclient.NewClient(tr, opts...)
			if err := c.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			init := mcp.InitializeRequest{}
			init.Params.ProtocolVersion = version
			init.Params.ClientInfo = mcp.Implementation{Name: "toolbus-interop-mcp-go", Version: "1"}
			if res, err := c.Initialize(t.Context(), init); err != nil || res.ProtocolVersion != version {
				t.Fatalf("initialize: %+v %v", res, err)
			}
			list, err := c.ListTools(t.Context(), mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range list.Tools {
				names = append(names, tool.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, opsTools) {
				t.Fatalf("tools/list: %v", names)
			}
			call := func(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
				req := mcp.CallToolRequest{}
				req.Params.Name, req.Params.Arguments = name, args
				ctx, cancel := context.WithTimeout(ctx, bound)
				defer cancel()
				return c.CallTool(ctx, req)
			}
			text := func(r *mcp.CallToolResult) string {
				var b strings.Builder
				for _, c := range r.Content {
					if tc, ok := c.(mcp.TextContent); ok {
						b.WriteString(tc.Text)
					}
				}
				return b.String()
			}
			if r, err := call(t.Context(), "hello", map[string]any{"name": "mcp-go"}); err != nil || text(r) != "hello mcp-go" {
				t.Fatalf("hello: %+v %v", r, err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := call(ctx, "wait", map[string]any{})
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
			if r, err := call(t.Context(), "hello", map[string]any{"name": "again"}); err != nil || text(r) != "hello again" {
				t.Fatalf("hello after the cancel: %+v %v", r, err)
			}
			if r, err := call(t.Context(), "deploy", map[string]any{}); err != nil || r.IsError || text(r) != "deployed" {
				t.Fatalf("deploy allowed by the host's user: %+v %v", r, err)
			}
			if msg := testkit.Recv(t, el.asked, bound, "the elicitation"); !strings.Contains(msg, "deploy") {
				t.Fatalf("elicitation message %q", msg)
			}
		})
	}
}
