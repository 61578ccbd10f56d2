package bridge

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackServerListsManyTools (session 34, red team): a bridged MCP
// server (third-party code, the least trusted role) lists 2,000 tools.
// The bridge registered every one: each went into the deployment's
// catalogue and into every session's tool listing (no group: basic), so
// one server's listing could crowd every agent's tools past what a model
// API takes (OpenAI: 128 tools a request). Now a server's first MaxTools
// tools are bridged and the rest left out, logged.
func TestAttackServerListsManyTools(t *testing.T) {
	e := newEnv(t)
	s := server.NewMCPServer("many", "1.0.0", server.WithToolCapabilities(true))
	for i := range 2000 {
		s.AddTool(mcp.NewTool(fmt.Sprintf("t%04d", i), mcp.WithDescription("One of many.")),
			func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			})
	}
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	b := e.bridge(&File{Servers: []Server{{Name: "m", Transport: TransportHTTP, URL: hs.URL + "/mcp"}}})
	testkit.CheckFor(t, 2*time.Minute, 20*time.Millisecond, func() error {
		if b.Tools("m") == nil {
			return errNotYet
		}
		return nil
	})
	if n := len(b.Tools("m")); n != MaxTools {
		t.Fatalf("%d of the server's 2,000 tools bridged, want %d", n, MaxTools)
	}
	_, names, err := e.defs()
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, n := range names {
		if strings.HasPrefix(n, "mcp__m__") {
			listed++
		}
	}
	if listed > MaxTools {
		t.Fatalf("s1 lists %d of the server's tools", listed)
	}
}
