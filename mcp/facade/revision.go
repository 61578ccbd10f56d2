package facade

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Revision downgrade (docs/mcp.md "Revision downgrade"): a host gets only
// the members and content types its MCP revision defines. The table below
// is read from the revisions' schema.json / schema.ts
// (modelcontextprotocol/modelcontextprotocol, schema/<revision>/):
//
//	member                                      since
//	text, image, embedded resource content      2024-11-05
//	content annotations audience, priority      2024-11-05
//	audio content                               2025-03-26
//	tool annotations (title and the hints)      2025-03-26
//	resource_link content                       2025-06-18
//	annotations.lastModified                    2025-06-18
//	tool title, outputSchema; structuredContent 2025-06-18
//	resource and template title                 2025-06-18
//	tool execution (taskSupport), icons         2025-11-25
//	the tasks server capability                 2025-11-25
//
// Later revisions (2026-07-28) know everything above.

// revision orders the MCP revisions; an unknown or empty version is taken
// as the newest (mcp-go negotiates only the ones it knows).
type revision int

const (
	rev20241105 revision = iota
	rev20250326
	rev20250618
	rev20251125
	revLatest
)

var revisionsByVersion = map[string]revision{mcp.ProtocolVersion20241105: rev20241105, mcp.ProtocolVersion20250326: rev20250326,
	mcp.ProtocolVersion20250618: rev20250618, mcp.ProtocolVersion20251125: rev20251125}

func revisionOf(version string) revision {
	if r, ok := revisionsByVersion[version]; ok {
		return r
	}
	return revLatest
}

// revisionFrom is the revision of the request in ctx.
func revisionFrom(ctx context.Context) revision {
	return revisionOf(server.RequestProtocolVersion(ctx))
}

// downgradeTools returns tools as a host at rev can read them.
func downgradeTools(rev revision, tools []mcp.Tool) []mcp.Tool {
	if rev >= rev20251125 {
		return tools
	}
	out := make([]mcp.Tool, len(tools))
	for i, t := range tools {
		t.Execution, t.Icons = nil, nil
		if rev < rev20250618 {
			t.Title, t.RawOutputSchema, t.OutputSchema, t.Meta = "", nil, mcp.ToolOutputSchema{}, nil
		}
		if rev < rev20250326 {
			// mcp-go always writes "annotations"; empty it is {}.
			t.Annotations = mcp.ToolAnnotation{}
		}
		out[i] = t
	}
	return out
}

// downgradeResult returns res as a host at rev can read it (the table
// above; resource links and audio become text naming them).
func downgradeResult(rev revision, res *mcp.CallToolResult) *mcp.CallToolResult {
	if res == nil || rev >= rev20250618 {
		return res
	}
	out := *res
	out.StructuredContent = nil
	out.Content = make([]mcp.Content, 0, len(res.Content))
	for _, c := range res.Content {
		out.Content = append(out.Content, downgradeContent(rev, c))
	}
	return &out
}

func downgradeContent(rev revision, c mcp.Content) mcp.Content {
	switch x := c.(type) {
	case mcp.ResourceLink:
		return withOldAnnotations(mcp.NewTextContent(linkText(x)), x.Annotations)
	case mcp.AudioContent:
		if rev < rev20250326 {
			return withOldAnnotations(mcp.NewTextContent(audioText(x)), x.Annotations)
		}
		x.Annotations, x.Meta = oldAnnotations(x.Annotations), nil
		return x
	case mcp.TextContent:
		x.Annotations, x.Meta = oldAnnotations(x.Annotations), nil
		return x
	case mcp.ImageContent:
		x.Annotations, x.Meta = oldAnnotations(x.Annotations), nil
		return x
	case mcp.EmbeddedResource:
		x.Annotations, x.Meta = oldAnnotations(x.Annotations), nil
		return x
	}
	return c
}

// linkText names a resource link for a host that has no resource_link;
// the URI stands between spaces, so it is copied whole.
func linkText(l mcp.ResourceLink) string {
	var parts []string
	if l.Name != "" && l.Name != l.URI {
		parts = append(parts, fmt.Sprintf("name %q", l.Name))
	}
	if l.MIMEType != "" {
		parts = append(parts, l.MIMEType)
	}
	if l.Size != nil {
		parts = append(parts, fmt.Sprintf("%d bytes", *l.Size))
	}
	s := "[resource " + l.URI
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if l.Description != "" {
		s += " — " + l.Description
	}
	return s + " — read it with resources/read]"
}

func audioText(a mcp.AudioContent) string {
	n := base64.StdEncoding.DecodedLen(len(a.Data))
	return fmt.Sprintf("[audio (%s, about %d bytes) left out: this MCP revision has no audio content]", a.MIMEType, n)
}

// oldAnnotations keeps what 2024-11-05 to 2025-03-26 define.
func oldAnnotations(a *mcp.Annotations) *mcp.Annotations {
	if a == nil || (len(a.Audience) == 0 && a.Priority == nil) {
		return nil
	}
	return &mcp.Annotations{Audience: a.Audience, Priority: a.Priority}
}

func withOldAnnotations(t mcp.TextContent, a *mcp.Annotations) mcp.TextContent {
	t.Annotations = oldAnnotations(a)
	return t
}

// downgradeInit takes away the tasks capability before 2025-11-25, and
// elicitation at every revision: it is a client capability (F4).
func downgradeInit(res *mcp.InitializeResult) {
	if res == nil {
		return
	}
	res.Capabilities.Elicitation = nil
	if revisionOf(res.ProtocolVersion) < rev20251125 {
		res.Capabilities.Tasks = nil
	}
}

func downgradeResources(rev revision, rs []mcp.Resource, ts []mcp.ResourceTemplate) {
	if rev >= rev20250618 {
		return
	}
	old := func(title *string, meta **mcp.Meta, a *mcp.Annotated) {
		*title, *meta, a.Annotations = "", nil, oldAnnotations(a.Annotations)
	}
	for i := range rs {
		old(&rs[i].Title, &rs[i].Meta, &rs[i].Annotated)
	}
	for i := range ts {
		old(&ts[i].Title, &ts[i].Meta, &ts[i].Annotated)
	}
}

// downgradeMiddleware applies downgradeResult to every tools/call result.
func downgradeMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := next(ctx, req)
		if err != nil {
			return res, err
		}
		return downgradeResult(revisionFrom(ctx), res), nil
	}
}
