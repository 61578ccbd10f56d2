package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
)

// maxName is the longest tool name (PROTOCOL.md 1).
const maxName = 64

// ToolName is the bus name of the MCP tool named tool on server:
// mcp__<server>__<tool>, every character outside [A-Za-z0-9_-] replaced
// by x; a name longer than 64 characters keeps its first 55 characters and
// gets "_" and 8 hex digits of the SHA-256 of "<server>\x00<tool>", so
// two long names that share a beginning stay apart and a name never changes.
func ToolName(server, tool string) string {
	name := "mcp__" + sanitize(server) + "__" + sanitize(tool)
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	return name[:maxName-9] + "_" + hex.EncodeToString(sum[:4])
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return 'x'
	}, s)
}

// Definition maps an MCP tool of server s to a bus tool definition
// (PROTOCOL.md 12): readOnlyHint → read_only and permission allow, else
// permission ask; idempotentHint → idempotent; never concurrency-safe or
// state-injected; inputSchema and outputSchema kept as they are.
func Definition(s *Server, t mcp.Tool) (bus.ToolDef, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return bus.ToolDef{}, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	var schemas struct {
		Input  json.RawMessage `json:"inputSchema"`
		Output json.RawMessage `json:"outputSchema"`
	}
	if err := json.Unmarshal(raw, &schemas); err != nil {
		return bus.ToolDef{}, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	if len(schemas.Input) == 0 || string(schemas.Input) == "null" {
		schemas.Input = json.RawMessage(`{"type":"object"}`)
	}
	if string(schemas.Output) == "null" {
		schemas.Output = nil
	}
	desc := t.Description
	if desc == "" {
		desc = t.Annotations.Title
	}
	d := bus.ToolDef{
		Name:            ToolName(s.Name, t.Name),
		Description:     desc,
		InputSchema:     schemas.Input,
		OutputSchema:    schemas.Output,
		ReadOnly:        isTrue(t.Annotations.ReadOnlyHint),
		Idempotent:      isTrue(t.Annotations.IdempotentHint),
		ConcurrencySafe: false,
		TimeoutMS:       s.timeout.Milliseconds(),
		Permission:      bus.PermissionAsk,
		MCP:             &bus.MCPRef{Server: s.Name, Tool: t.Name},
	}
	if d.ReadOnly {
		d.Permission = bus.PermissionAllow
	}
	if s.Group != "" {
		d.Groups = []string{s.Group}
	}
	d.Defaults()
	return d, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

// Result maps an MCP tool result to an exec result: text → text blocks,
// image and audio → data blocks, embedded resources → text or data blocks,
// resource links → data blocks by URL, structuredContent → a JSON text block
// after the content (unless a text block already holds exactly that JSON),
// isError → an error result.
func Result(r *mcp.CallToolResult) *bus.ExecResult {
	out := []bus.Block{}
	for _, c := range r.Content {
		out = append(out, block(c))
	}
	if sc := structured(r); sc != "" {
		dup := false
		for _, b := range out {
			if b.Type == bus.BlockText && b.Text == sc {
				dup = true
			}
		}
		if !dup {
			out = append(out, bus.Block{Type: bus.BlockText, Text: sc})
		}
	}
	res := &bus.ExecResult{State: bus.StateSuccess, Output: out}
	if r.IsError {
		res.State = bus.StateError
		if len(out) == 0 {
			res.Output = bus.Text("Error: the MCP tool reported an error without content")
		}
	}
	return res
}

func structured(r *mcp.CallToolResult) string {
	if len(r.RawStructuredContent) > 0 && string(r.RawStructuredContent) != "null" {
		return string(r.RawStructuredContent)
	}
	if r.StructuredContent == nil {
		return ""
	}
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		return ""
	}
	return string(b)
}

func block(c mcp.Content) bus.Block {
	switch v := c.(type) {
	case mcp.TextContent:
		return bus.Block{Type: bus.BlockText, Text: v.Text}
	case *mcp.TextContent:
		return bus.Block{Type: bus.BlockText, Text: v.Text}
	case mcp.ImageContent:
		return data(v.MIMEType, v.Data, "image/png")
	case *mcp.ImageContent:
		return data(v.MIMEType, v.Data, "image/png")
	case mcp.AudioContent:
		return data(v.MIMEType, v.Data, "audio/wav")
	case *mcp.AudioContent:
		return data(v.MIMEType, v.Data, "audio/wav")
	case mcp.EmbeddedResource:
		return resource(v.Resource)
	case *mcp.EmbeddedResource:
		return resource(v.Resource)
	case mcp.ResourceLink:
		return resourceLink(v)
	case *mcp.ResourceLink:
		return resourceLink(*v)
	}
	b, _ := json.Marshal(c)
	return bus.Block{Type: bus.BlockText, Text: string(b)}
}

func data(mediaType, b64, def string) bus.Block {
	if mediaType == "" {
		mediaType = def
	}
	return bus.Block{Type: bus.BlockData, MediaType: mediaType, Data: b64}
}

func resourceLink(l mcp.ResourceLink) bus.Block {
	mt := l.MIMEType
	if mt == "" {
		mt = "application/octet-stream"
	}
	return bus.Block{Type: bus.BlockData, MediaType: mt, URL: l.URI}
}

func resource(r mcp.ResourceContents) bus.Block {
	switch v := r.(type) {
	case mcp.TextResourceContents:
		return bus.Block{Type: bus.BlockText, Text: v.Text}
	case *mcp.TextResourceContents:
		return bus.Block{Type: bus.BlockText, Text: v.Text}
	case mcp.BlobResourceContents:
		return data(v.MIMEType, v.Blob, "application/octet-stream")
	case *mcp.BlobResourceContents:
		return data(v.MIMEType, v.Blob, "application/octet-stream")
	}
	b, _ := json.Marshal(r)
	return bus.Block{Type: bus.BlockText, Text: string(b)}
}
