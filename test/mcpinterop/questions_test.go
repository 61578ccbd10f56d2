package mcpinterop

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/mcp/mcptest"
)

// TestGoSDKBridgedQuestion: a bridged mcp-go server's question
// (elicitation/create, mcptest.AskServer) while the Go SDK (v1.8.0) calls
// its tool through the facade reaches the SDK's elicitation handler at
// 2025-11-25 (the facade's own elicitation/create) and at 2026-07-28 (an
// input_required result the SDK answers and retries, docs/mcp.md
// "Bridged servers' questions reach the host"): accepted content, then a
// decline, each reaching the server.
func TestGoSDKBridgedQuestion(t *testing.T) {
	e := newEnv(t)
	e.bridge(t, bridge.Server{Name: "q", Transport: bridge.TransportHTTP, URL: mcptest.AskServer(t)}, bridge.Config{Heartbeat: time.Second}, "mcp__q__ask")
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			asked := make(chan string, 4)
			action := "accept"
			c := mcp.NewClient(&mcp.Implementation{Name: "toolbus-interop-go", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked <- req.Params.Message
					if action != "accept" {
						return &mcp.ElicitResult{Action: action}, nil
					}
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
				},
			})
			tr := &mcp.StreamableClientTransport{Endpoint: e.url("goq"), HTTPClient: &http.Client{Transport: &wire{}}, MaxRetries: -1}
			cs, err := c.Connect(t.Context(), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %s, want %s", got, version)
			}
			for _, want := range []struct{ action, text string }{{"accept", `accept {"name":"Ada"}`}, {"decline", "decline null"}} {
				action = want.action
				ctx, cancel := context.WithTimeout(t.Context(), bound)
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__q__ask", Arguments: map[string]any{}})
				cancel()
				if err != nil || res.IsError || goText(res) != want.text {
					t.Fatalf("%s: %+v %v", want.action, res, err)
				}
				if msg := testkit.Recv(t, asked, bound, "the question"); msg != "The MCP server q asks: Your name, please." {
					t.Fatalf("the host was shown %q", msg)
				}
			}
		})
	}
}
