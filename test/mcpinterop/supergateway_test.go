package mcpinterop

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSupergateway: supergateway 4.0.0 (`--streamableHttp <url>
// --oauth2Bearer <token>`, stdio out) at the URL the README gives,
// driven over stdio by the Go SDK at 2025-11-25 (the newest revision its
// TypeScript SDK 1.30 speaks): list and call, twice on one connection.
//
// Not tested, because supergateway cannot do them: it relays each stdio
// request through its own client, under that client's JSON-RPC ids
// (starting at 0 for its initialize), but relays the host's
// notifications/cancelled unchanged, so the cancel names an id the
// facade knows as another request: seen here, the host's cancel of its
// call 4 cancelled the next call (the facade's 4) and the bus call it
// meant ran on. It has no handler for server requests or notifications,
// so elicitation and list_changed never reach the host (docs/mcp.md,
// "Interop").
func TestSupergateway(t *testing.T) {
	gw := filepath.Join(jsDir(t), "node_modules", "supergateway", "dist", "index.js")
	e := newEnv(t)
	cmd := exec.CommandContext(t.Context(), "node", gw, "--streamableHttp", e.url("sg1"),
		"--oauth2Bearer", token, "--logLevel", "none")
	c := mcp.NewClient(&mcp.Implementation{Name: "toolbus-interop-go-stdio", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != "2025-11-25" {
		t.Fatalf("negotiated %s", got)
	}
	h := &goHost{ClientSession: cs}
	if got := h.names(t); !slices.Equal(got, basicTools) {
		t.Fatalf("tools/list: %v", got)
	}
	for _, name := range []string{"gateway", "again"} {
		if text, isErr := h.call(t, "hello", map[string]any{"name": name}); isErr || text != "hello "+name {
			t.Fatalf("hello: %q %v", text, isErr)
		}
	}
}
