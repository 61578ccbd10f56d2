package facade

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
)

// TestToMCPFaithful: a bus result reaches an MCP host with what its blocks
// say: structured output once (structuredContent, plus its JSON as text
// only when there is no text), resource links with their name and
// description, embedded resources with their URI, and annotations.
func TestToMCPFaithful(t *testing.T) {
	js := base64.StdEncoding.EncodeToString([]byte(`{"temp":4}`))
	prio := 0.5
	r := toMCP(bus.Result{ID: "c1", State: bus.StateSuccess, Output: []bus.Block{
		{Type: bus.BlockText, Text: "4°C", Annotations: &bus.Annotations{Audience: []string{"user"}, Priority: &prio}},
		{Type: bus.BlockData, MediaType: "application/json", Data: js},
		{Type: bus.BlockData, MediaType: "application/pdf", URL: "https://example.com/c.pdf", Name: "c.pdf", Description: "The C report."},
		{Type: bus.BlockText, Text: "hello", URI: "file:///notes.txt", MediaType: "text/plain"},
	}})
	if string(r.StructuredContent.(json.RawMessage)) != `{"temp":4}` {
		t.Fatalf("structuredContent %v", r.StructuredContent)
	}
	if len(r.Content) != 3 {
		t.Fatalf("content %d blocks, want text, link, resource (the JSON not repeated): %+v", len(r.Content), r.Content)
	}
	text := r.Content[0].(mcp.TextContent)
	if text.Text != "4°C" || text.Annotations == nil || *text.Annotations.Priority != 0.5 || text.Annotations.Audience[0] != mcp.RoleUser {
		t.Errorf("text %+v", text)
	}
	link := r.Content[1].(mcp.ResourceLink)
	if link.Name != "c.pdf" || link.Description != "The C report." || link.URI != "https://example.com/c.pdf" {
		t.Errorf("link %+v", link)
	}
	res := r.Content[2].(mcp.EmbeddedResource).Resource.(mcp.TextResourceContents)
	if res.URI != "file:///notes.txt" || res.Text != "hello" {
		t.Errorf("embedded %+v", res)
	}
	// Structured output alone: its JSON as text too, for hosts that do not read it.
	only := toMCP(bus.Result{ID: "c2", State: bus.StateSuccess, Output: []bus.Block{{Type: bus.BlockData, MediaType: "application/json", Data: js}}})
	if len(only.Content) != 1 || only.Content[0].(mcp.TextContent).Text != `{"temp":4}` || only.StructuredContent == nil {
		t.Errorf("structured only: %+v", only)
	}
}

// TestLinkOnTheWire: a stored output's resource_link carries its size and
// a description that says what it is, its digest and how to read it; a
// link with a description of its own keeps it (issue 29, F3).
func TestLinkOnTheWire(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	ref := "nats-object://P_outputs/s1.r1.c1.tok.0#sha256=" + digest
	r := toMCP(bus.Result{ID: "c1", State: bus.StateSuccess, Output: []bus.Block{
		{Type: bus.BlockData, MediaType: "text/plain; charset=utf-8", URL: ref, Size: 3145728},
		{Type: bus.BlockData, MediaType: "application/pdf", URL: "https://example.com/c.pdf", Name: "c.pdf", Description: "The C report.", Size: 10},
		{Type: bus.BlockData, MediaType: "image/png", URL: "file:///a.png"},
	}})
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var wire struct {
		Content []struct {
			Type        string `json:"type"`
			URI         string `json:"uri"`
			Description string `json:"description"`
			Size        *int64 `json:"size"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		t.Fatal(err)
	}
	if len(wire.Content) != 3 {
		t.Fatalf("content: %s", raw)
	}
	stored := wire.Content[0]
	if stored.Type != "resource_link" || stored.Size == nil || *stored.Size != 3145728 {
		t.Errorf("stored link without its size: %s", raw)
	}
	for _, want := range []string{"3145728 bytes", digest, "resources/read", ReadOutputTool} {
		if !strings.Contains(stored.Description, want) {
			t.Errorf("description %q lacks %q", stored.Description, want)
		}
	}
	if own := wire.Content[1]; own.Description != "The C report." || own.Size == nil || *own.Size != 10 {
		t.Errorf("a link's own description and size: %+v", own)
	}
	if other := wire.Content[2]; other.Size != nil || !strings.Contains(other.Description, "resources/read") {
		t.Errorf("a link without a size: %+v (%s)", other, raw)
	}
	if !strings.Contains(string(raw), `"size":3145728`) {
		t.Errorf("no size on the wire: %s", raw)
	}
}
