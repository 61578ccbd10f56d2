package mcpinterop

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/mcp/bridge"
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
	nc := e.conn(t, "bridge")
	b, err := bridge.New(nc, &bridge.File{Servers: []bridge.Server{{Name: "everything", Command: "node", Args: []string{entry, "stdio"},
		EnableTools: []string{"get-structured-content"}, Timeout: "60s"}}}, bridge.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	const tool = "mcp__everything__get-structured-content"
	if err := e.d.WaitLive(t.Context(), tool); err != nil {
		t.Fatal(err)
	}
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
