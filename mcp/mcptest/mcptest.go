// Package mcptest holds MCP servers the tests of several packages share.
package mcptest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// AskServer starts an mcp-go server over streamable HTTP whose read-only
// tool ask asks its client for a name (elicitation) and returns
// "<action> <content JSON>"; it returns the server's MCP URL and stops it
// when the test ends.
func AskServer(t testing.TB) string {
	t.Helper()
	s := server.NewMCPServer("asker", "1", server.WithElicitation())
	s.AddTool(mcp.NewTool("ask", mcp.WithDescription("Asks the user for a name."), mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, err := s.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{Message: "Your name, please.",
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
