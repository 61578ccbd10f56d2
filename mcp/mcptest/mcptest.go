// Package mcptest holds MCP servers the tests of several packages share.
package mcptest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// AskServer starts an mcp-go server over streamable HTTP whose read-only
// tool ask asks its client for a name (elicitation: "Your name, please.",
// or "Your name, please (for <for>)." when called with the argument for)
// and returns "<action> <content JSON>"; it returns the server's MCP URL
// and stops it when the test ends.
func AskServer(t testing.TB) string {
	t.Helper()
	s := server.NewMCPServer("asker", "1", server.WithElicitation())
	s.AddTool(mcp.NewTool("ask", mcp.WithDescription("Asks the user for a name."), mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithString("for", mcp.Description("Whom the name is for."))),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			msg := "Your name, please."
			if who := req.GetString("for", ""); who != "" {
				msg = "Your name, please (for " + who + ")."
			}
			r, err := s.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{Message: msg,
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}},
					"required": []string{"name"}}}})
			if err != nil {
				return mcp.NewToolResultError("elicitation failed: " + err.Error()), nil
			}
			c, _ := json.Marshal(r.Content)
			return mcp.NewToolResultText(string(r.Action) + " " + string(c)), nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// ParkedEvent waits up to bound for the next io.toolbus.call.parked of
// tool on ev and returns its reply id and parked call.
func ParkedEvent(t testing.TB, ev *client.Events, tool string, bound time.Duration) (replyID string, p bus.Parked) {
	t.Helper()
	timeout := time.After(bound)
	for {
		select {
		case m := <-ev.C:
			if m.Type != bus.TypeCallParked {
				continue
			}
			var pe bus.ParkedEvent
			if err := m.DataAs(&pe); err == nil && len(pe.Calls) > 0 && pe.Calls[0].Name == tool {
				return m.ReplyID, pe.Calls[0]
			}
		case <-timeout:
			t.Fatalf("no call.parked of %s within %s", tool, bound)
		}
	}
}
