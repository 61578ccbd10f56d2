package facade

import (
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestStructureText: a tool with an output schema whose result is one JSON
// object as text gets it as structuredContent; nothing else changes.
func TestStructureText(t *testing.T) {
	img := mcp.NewImageContent("aGk=", "image/png")
	for _, tc := range []struct {
		name string
		res  *mcp.CallToolResult
		want string // structuredContent as JSON; "" none
	}{
		{"object", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"n":3}`)}}, `{"n":3}`},
		{"object with spaces", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(" {\"n\": 3}\n")}}, `{"n":3}`},
		{"array", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`[1]`)}}, ""},
		{"plain text", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`three`)}}, ""},
		{"broken JSON", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"n":`)}}, ""},
		{"error", &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.NewTextContent(`{"n":3}`)}}, ""},
		{"two blocks", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"n":3}`), mcp.NewTextContent(`{}`)}}, ""},
		{"not text", &mcp.CallToolResult{Content: []mcp.Content{img}}, ""},
		{"empty", &mcp.CallToolResult{Content: []mcp.Content{}}, ""},
		{"already structured", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"n":3}`)}, StructuredContent: json.RawMessage(`{"m":1}`)}, `{"m":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.res.Content)
			structureText(tc.res)
			got := ""
			if tc.res.StructuredContent != nil {
				raw, _ := json.Marshal(tc.res.StructuredContent)
				got = string(raw)
			}
			if got != tc.want || len(tc.res.Content) != before {
				t.Fatalf("structuredContent %q (content %d blocks), want %q (%d)", got, len(tc.res.Content), tc.want, before)
			}
		})
	}
}
