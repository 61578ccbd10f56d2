package facade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus/offload"
)

// structurer makes the result of a tool listed with an outputSchema carry
// structuredContent, which MCP (2025-06-18 and later) asks of its
// successful results, and the TypeScript SDK and the Inspector check.
//
//   - A result whose only content is one text block holding a JSON object
//     (a toolbus worker's typed output) gets that object (issue 18).
//   - An offloaded result (docs/offload.md) is read back from the store, at
//     most max bytes, and a JSON object there is returned inline; the
//     links and previews stay in the content (issue 29, F1).
//   - An offloaded result whose JSON is larger, or not an object, is
//     returned as an isError result (which hosts do not check against the
//     schema) saying why and where the output is.
type structurer struct {
	session string
	fetch   outputFetcher
	max     int64
}

func (st structurer) wrap(h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := h(ctx, req)
		if err == nil && res != nil && !handleWithoutSchema(res) {
			structureText(res)
			st.restore(ctx, res)
		}
		return res, err
	}
}

// restore sets res.StructuredContent from a stored output it links to;
// when none serves, a result with stored links becomes an isError result
// saying why.
func (st structurer) restore(ctx context.Context, res *mcp.CallToolResult) {
	if res.IsError || res.StructuredContent != nil || len(res.RawStructuredContent) > 0 {
		return
	}
	var links []mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(mcp.ResourceLink); ok && st.ours(l.URI) {
			links = append(links, l)
		}
	}
	if len(links) == 0 {
		return // not offloaded: as the tool returned it
	}
	var why []string
	for _, l := range links {
		if !jsonish(l.MIMEType) {
			continue
		}
		raw, _, err := readStored(ctx, st.fetch, st.session, l.URI, st.max, "inline")
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '{' && json.Valid(raw) {
			res.StructuredContent = json.RawMessage(raw)
			return
		}
		why = append(why, fmt.Sprintf("%s is not a JSON object", l.URI))
	}
	if len(why) == 0 {
		why = append(why, "no stored part of it is JSON")
	}
	res.IsError = true
	note := "The tool's output was too large to send inline and was stored; it cannot be returned as the structured " +
		"content its output schema describes (" + strings.Join(why, "; ") + "). The call succeeded: the parts below " +
		"are previews and links; read any range of a stored part with the " + ReadOutputTool + " tool, or whole with resources/read."
	res.Content = append([]mcp.Content{mcp.NewTextContent(note)}, res.Content...)
}

func (st structurer) ours(uri string) bool {
	r, err := offload.ParseRef(uri)
	return err == nil && r.Session() == st.session && r.Digest != ""
}

// jsonish reports whether a stored part may hold the JSON object: JSON,
// or plain text (a worker's typed output, stored as text/plain).
func jsonish(media string) bool {
	mt, _, err := mime.ParseMediaType(media)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "text/plain"
}

// structureText sets res.StructuredContent from its one text block when
// that holds a JSON object.
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
