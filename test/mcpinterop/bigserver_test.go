package mcpinterop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// bigServer starts an mcp-go server over streamable HTTP whose read-only
// tool big, listed with an outputSchema, returns n lines ("line <i>",
// padded to 64 bytes each) as one text block and as structuredContent
// {"count": n, "lines": [...]}; it returns the server's MCP URL and stops
// it when the test ends.
func bigServer(t testing.TB, n int) string {
	t.Helper()
	s := server.NewMCPServer("big", "1")
	tool := mcp.NewTool("big", mcp.WithDescription("Returns many lines."), mcp.WithReadOnlyHintAnnotation(true))
	tool.RawOutputSchema = json.RawMessage(`{"type":"object","properties":{"count":{"type":"integer"},` +
		`"lines":{"type":"array","items":{"type":"string"}}},"required":["count","lines"]}`)
	s.AddTool(tool, func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		lines := make([]string, n)
		for i := range lines {
			lines[i] = fmt.Sprintf("line %-58d", i)
		}
		res := mcp.NewToolResultText(strings.Join(lines, "\n"))
		res.StructuredContent = map[string]any{"count": n, "lines": lines}
		return res, nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}
