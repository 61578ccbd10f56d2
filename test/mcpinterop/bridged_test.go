package mcpinterop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/router"
)

// TestBridgedToHost: a tool of @modelcontextprotocol/server-everything
// (2026.8.31, the examples/mcp pin) bridged onto the bus over stdio
// reaches hosts through the facade with its output once: the TypeScript
// SDK (which checks structuredContent against the listed outputSchema)
// and the Go SDK each get get-structured-content's text block as the
// server sent it, no second copy of the JSON, and its structuredContent.
func TestBridgedToHost(t *testing.T) {
	callJS := script(t, "call.mjs")
	entry := filepath.Join(jsDir(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	e := newEnv(t)
	const tool = "mcp__everything__get-structured-content"
	e.bridge(t, bridge.Server{Name: "everything", Command: "node", Args: []string{entry, "stdio"},
		EnableTools: []string{"get-structured-content"}, Timeout: "60s"}, bridge.Config{}, tool)
	args := map[string]any{"location": "Chicago"}

	// The TypeScript SDK.
	rawArgs, _ := json.Marshal(args)
	p := runNode(t, callJS, e.url("bridged1"), token, tool, string(rawArgs))
	if st := p.next(t, "listed"); len(st.Names) != 1 || len(st.Structured) == 0 || string(st.Structured) == "null" {
		t.Fatalf("listed: %+v", st)
	}
	var ts struct {
		Result struct {
			Content []struct {
				Type, Text string
			} `json:"content"`
			StructuredContent json.RawMessage `json:"structuredContent"`
			IsError           bool            `json:"isError"`
		} `json:"result"`
	}
	st := p.nextRaw(t, "result")
	if err := json.Unmarshal(st, &ts); err != nil {
		t.Fatal(err)
	}
	if r := ts.Result; r.IsError || len(r.Content) != 1 || r.Content[0].Type != "text" || len(r.StructuredContent) == 0 {
		t.Fatalf("TypeScript SDK: %s", st)
	}

	// The Go SDK, at both revisions.
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		h := connectGo(t, e.url("bridged2"), version)
		res, err := h.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || len(res.Content) != 1 || res.StructuredContent == nil {
			t.Fatalf("Go SDK at %s: %+v", version, res)
		}
		if goText(res) != ts.Result.Content[0].Text {
			t.Fatalf("Go SDK at %s: text %q, the TypeScript SDK got %q", version, goText(res), ts.Result.Content[0].Text)
		}
	}
}

// TestBridgedLargeStructured: a bridged tool listed with an outputSchema
// whose result (about 3 MB of text and the same as structuredContent) is
// offloaded reaches the TypeScript SDK (which checks structuredContent
// against the listed schema) without an error: the facade reads the stored
// JSON back and returns it inline, with the text's preview and its link,
// which carries its size and says how to read it (issue 29, F1, F3).
func TestBridgedLargeStructured(t *testing.T) {
	callJS := script(t, "call.mjs")
	e := newEnv(t)
	const lines = 48 << 10 // 64 bytes each: 3 MiB of text, and as much JSON
	const tool = "mcp__big__big"
	e.bridge(t, bridge.Server{Name: "big", Transport: bridge.TransportHTTP, URL: bigServer(t, lines), Timeout: "60s"},
		bridge.Config{Heartbeat: time.Second}, tool)
	p := runNode(t, callJS, e.url("big1"), token, tool, "{}", "summary")
	if st := p.next(t, "listed"); len(st.Names) != 1 || len(st.Structured) == 0 || string(st.Structured) == "null" {
		t.Fatalf("listed without its outputSchema: %+v", st)
	}
	// The call may take up to the server's own 60 s (its 6 MB pass through
	// the bridge, the store and the facade, slow under the race detector
	// on a loaded machine): a result or an error comes by then.
	_, raw := p.nextWithin(t, "result", 90*time.Second)
	var got struct {
		Result struct {
			IsError bool `json:"isError"`
			Content []struct {
				Type, Text, URI, Description string
				Size                         int64
			} `json:"content"`
			Structured *struct {
				Count, Lines int
				Last         string
			} `json:"structured"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	r := got.Result
	if r.IsError || r.Structured == nil || r.Structured.Count != lines || r.Structured.Lines != lines ||
		!strings.HasPrefix(r.Structured.Last, fmt.Sprintf("line %d", lines-1)) {
		t.Fatalf("TypeScript SDK: %s", raw)
	}
	links := 0
	for _, c := range r.Content {
		if c.Type == "resource_link" {
			links++
			if !strings.HasPrefix(c.URI, "nats-object://") || c.Size <= 0 || !strings.Contains(c.Description, "read_output") {
				t.Fatalf("link %+v", c)
			}
		}
	}
	if links == 0 || r.Content[0].Type != "text" || !strings.HasPrefix(r.Content[0].Text, "line 0") {
		t.Fatalf("no preview and link: %s", raw)
	}
	t.Logf("TypeScript SDK result: %s", raw)
}

// TestInspectorBridgedLarge (issue 29, F1): the MCP Inspector's CLI
// (2.12.0, through its launcher: `npx @modelcontextprotocol/inspector
// --cli ...`) calls @modelcontextprotocol/server-filesystem's
// read_text_file (listed with an outputSchema {"content": string}),
// bridged over stdio, on a 3 MiB file through the facade: no error, the
// whole file as the structuredContent the schema asks for, and a link to
// the stored text, of which the Inspector then reads any part with the
// router's read_output (docs/protocol.md 5.9, 11): by byte offset at the
// start, the middle and the end, and by line.
func TestInspectorBridgedLarge(t *testing.T) {
	entry := filepath.Join(jsDir(t), "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	cli := filepath.Join(jsDir(t), "node_modules", "inspector-2", "clients", "launcher", "build", "index.js")
	e := startEnvWith(t, router.Guard{ReadOutput: true}, nil)
	root := t.TempDir()
	const lines = 48 << 10 // 64 bytes each: 3 MiB
	var big bytes.Buffer
	for i := range lines {
		fmt.Fprintf(&big, "line %-58d\n", i)
	}
	file := filepath.Join(root, "big.txt")
	if err := os.WriteFile(file, big.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	const tool = "mcp__fs__read_text_file"
	e.bridge(t, bridge.Server{Name: "fs", Command: "node", Args: []string{entry, root}, EnableTools: []string{"read_text_file"}, Timeout: "60s"},
		bridge.Config{}, tool)
	args := []string{e.base + "/mcp", "--header", "Authorization: Bearer " + token, "--header", facade.SessionHeader + ": insp-big",
		"--transport", "http", "--method", "tools/call"}
	type result struct {
		Content []struct {
			Type, Text, URI, MimeType, Description string
			Size                                   int64
		} `json:"content"`
		StructuredContent *struct {
			Content string `json:"content"`
		} `json:"structuredContent"`
		IsError bool `json:"isError"`
	}
	var res result
	inspector(t, cli, &res, append(args, "--tool-name", tool, "--tool-arg", "path="+file)...)
	if res.IsError || res.StructuredContent == nil || res.StructuredContent.Content != big.String() {
		t.Fatalf("read_text_file: isError %v, structuredContent of %d bytes, content %+v", res.IsError, structuredLen(res.StructuredContent), res.Content)
	}
	ref := ""
	for _, c := range res.Content {
		if c.Type == "resource_link" && strings.HasPrefix(c.MimeType, "text/") {
			ref = c.URI
			if c.Size != int64(big.Len()) || !strings.HasPrefix(c.URI, "nats-object://") || !strings.Contains(c.Description, "read_output") {
				t.Fatalf("the text's link: %+v", c)
			}
		}
	}
	if ref == "" || res.Content[0].Type != "text" || !strings.HasPrefix(res.Content[0].Text, "line 0") {
		t.Fatalf("no preview and link to the text: %+v", res.Content)
	}

	read := func(arg string, limit int) string {
		t.Helper()
		var res result
		inspector(t, cli, &res, append(args, "--tool-name", "read_output", "--tool-arg", "ref="+ref, "--tool-arg", arg,
			"--tool-arg", fmt.Sprintf("limit=%d", limit))...)
		if res.IsError || len(res.Content) != 1 {
			t.Fatalf("read_output %s: %+v", arg, res)
		}
		head, part, ok := strings.Cut(res.Content[0].Text, "\n")
		if !ok || !strings.HasPrefix(head, "[read_output: ") {
			t.Fatalf("read_output %s: %.200q", arg, res.Content[0].Text)
		}
		return part
	}
	for _, off := range []int{0, big.Len()/2 + 5, big.Len() - 100} {
		if got, want := read(fmt.Sprintf("offset=%d", off), 4096), big.String()[off:min(off+4096, big.Len())]; got != want {
			t.Fatalf("read_output at offset %d: %.80q, want %.80q", off, got, want)
		}
	}
	if got, want := read("line=30001", 3), big.String()[30000*64:30003*64]; got != want {
		t.Fatalf("read_output from line 30001: %q, want %q", got, want)
	}
}

func structuredLen(s *struct {
	Content string `json:"content"`
}) int {
	if s == nil {
		return -1
	}
	return len(s.Content)
}
