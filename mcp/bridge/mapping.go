package bridge

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
)

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
// (docs/protocol.md 12 has the table): titles and descriptions cut at
// MaxTitle and MaxDescription, readOnlyHint to read_only and permission
// allow (else ask), annotations kept under mcp, schemas as they are.
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
	title := cut(cmp.Or(t.Title, t.Annotations.Title), MaxTitle)
	desc := cut(cmp.Or(t.Description, title), MaxDescription)
	ref := &bus.MCPRef{Server: s.Name, Tool: t.Name, Annotations: annotations(t.Annotations)}
	if t.Execution != nil {
		ref.TaskSupport = string(t.Execution.TaskSupport)
	}
	d := bus.ToolDef{
		Name:            ToolName(s.Name, t.Name),
		Title:           title,
		Description:     desc,
		InputSchema:     schemas.Input,
		OutputSchema:    schemas.Output,
		ReadOnly:        isTrue(t.Annotations.ReadOnlyHint),
		Idempotent:      isTrue(t.Annotations.IdempotentHint),
		ConcurrencySafe: false,
		TimeoutMS:       s.timeout.Milliseconds(),
		Permission:      bus.PermissionAsk,
		MCP:             ref,
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

func annotations(a mcp.ToolAnnotation) *bus.MCPAnnotations {
	out := bus.MCPAnnotations{Title: cut(a.Title, MaxTitle), ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
		IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}
	if out == (bus.MCPAnnotations{}) {
		return nil
	}
	return &out
}

func isTrue(b *bool) bool { return b != nil && *b }

// Result maps an MCP tool result to an exec result (docs/protocol.md 12 has
// the table: content to blocks, structuredContent to a JSON data block,
// isError to an error result).
func Result(r *mcp.CallToolResult) *bus.ExecResult {
	out := []bus.Block{}
	for _, c := range r.Content {
		out = append(out, block(c))
	}
	if sc := structured(r); sc != nil {
		out = append(out, bus.Block{Type: bus.BlockData, MediaType: "application/json", Data: base64.StdEncoding.EncodeToString(sc)})
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

// structured returns the result's structuredContent as compact JSON.
func structured(r *mcp.CallToolResult) []byte {
	b := []byte(r.RawStructuredContent)
	if len(b) == 0 || string(b) == "null" {
		if r.StructuredContent == nil {
			return nil
		}
		var err error
		if b, err = json.Marshal(r.StructuredContent); err != nil {
			return nil
		}
	}
	var c bytes.Buffer
	if json.Compact(&c, b) != nil {
		return b
	}
	return c.Bytes()
}

// deref returns the value x points to when it is a non-nil pointer to a
// T (content a Go server built from pointers), else x.
func deref[T any](x T) T {
	if v := reflect.ValueOf(x); v.Kind() == reflect.Pointer && !v.IsNil() {
		if e, ok := v.Elem().Interface().(T); ok {
			return e
		}
	}
	return x
}

func block(c mcp.Content) bus.Block {
	switch v := deref(c).(type) {
	case mcp.TextContent:
		return annotate(bus.Block{Type: bus.BlockText, Text: v.Text}, v.Annotations)
	case mcp.ImageContent:
		return annotate(data(v.MIMEType, v.Data, "image/png"), v.Annotations)
	case mcp.AudioContent:
		return annotate(data(v.MIMEType, v.Data, "audio/wav"), v.Annotations)
	case mcp.EmbeddedResource:
		return annotate(resource(v.Resource), v.Annotations)
	case mcp.ResourceLink:
		return resourceLink(v)
	}
	b, _ := json.Marshal(c)
	return bus.Block{Type: bus.BlockText, Text: string(b)}
}

// annotate sets b's annotations from MCP content annotations, leaving out
// values docs/protocol.md 3.3 does not allow (the router would refuse the
// whole result).
func annotate(b bus.Block, a *mcp.Annotations) bus.Block {
	if a == nil {
		return b
	}
	out := &bus.Annotations{Priority: a.Priority, LastModified: a.LastModified}
	for _, r := range a.Audience {
		if r := string(r); r == bus.AudienceUser || r == bus.AudienceAssistant {
			out.Audience = append(out.Audience, r)
		}
	}
	if (&bus.Annotations{Priority: out.Priority}).Check() != nil {
		out.Priority = nil
	}
	if (&bus.Annotations{LastModified: out.LastModified}).Check() != nil {
		out.LastModified = ""
	}
	if len(out.Audience) == 0 && out.Priority == nil && out.LastModified == "" {
		return b
	}
	b.Annotations = out
	return b
}

func data(mediaType, b64, def string) bus.Block {
	return bus.Block{Type: bus.BlockData, MediaType: cmp.Or(mediaType, def), Data: b64}
}

func resourceLink(l mcp.ResourceLink) bus.Block {
	b := bus.Block{Type: bus.BlockData, MediaType: cmp.Or(l.MIMEType, "application/octet-stream"), URL: l.URI, Name: l.Name, Title: l.Title, Description: l.Description}
	if l.Size != nil && *l.Size > 0 {
		b.Size = *l.Size
	}
	return annotate(b, l.Annotations)
}

func resource(r mcp.ResourceContents) bus.Block {
	switch v := deref(r).(type) {
	case mcp.TextResourceContents:
		return bus.Block{Type: bus.BlockText, Text: v.Text, URI: v.URI, MediaType: v.MIMEType}
	case mcp.BlobResourceContents:
		b := data(v.MIMEType, v.Blob, "application/octet-stream")
		b.URI = v.URI
		return b
	}
	b, _ := json.Marshal(r)
	return bus.Block{Type: bus.BlockText, Text: string(b)}
}
