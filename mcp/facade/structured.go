package facade

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// withStructured wraps the handler of a tool listed with an outputSchema.
// MCP (2025-06-18 and later) says such a tool's successful result carries
// structuredContent, and the TypeScript SDK refuses a result without it
// ("has an output schema but did not return structured content"). A
// toolbus worker returns its typed output as one JSON text block (and a
// bridged server's structuredContent arrives as a data block, which toMCP
// maps already), so a result whose only content is one text block holding
// a JSON object gets that object as its structuredContent too; the text
// stays, for hosts that read only content. Anything else is left as it is
// (issue 18, found by test/mcpinterop's TestTypeScriptSDK).
func withStructured(h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := h(ctx, req)
		if err == nil && res != nil {
			structureText(res)
		}
		return res, err
	}
}

// structureText sets res.StructuredContent from its text when res is a
// success without structured content whose one content block is a text
// holding a JSON object.
func structureText(res *mcp.CallToolResult) {
	if res.IsError || res.StructuredContent != nil || len(res.RawStructuredContent) > 0 || len(res.Content) != 1 {
		return
	}
	tc, ok := res.Content[0].(mcp.TextContent)
	if !ok {
		return
	}
	raw := bytes.TrimSpace([]byte(tc.Text))
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return
	}
	res.StructuredContent = json.RawMessage(raw)
}
