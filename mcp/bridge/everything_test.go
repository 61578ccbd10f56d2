package bridge

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// TestEverything bridges the MCP reference server
// @modelcontextprotocol/server-everything through npx. It skips when npx
// is missing or the package cannot be installed or started within a minute.
func TestEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("npx not found")
	}
	e := newEnv(t)
	b := e.bridge(&File{Servers: []Server{{Name: "everything", Command: npx, Args: []string{"-y", "@modelcontextprotocol/server-everything"}, Timeout: "60s"}}})
	deadline := time.Now().Add(time.Minute)
	for len(b.Tools("everything")) == 0 {
		if time.Now().After(deadline) {
			t.Skip("@modelcontextprotocol/server-everything did not start (not installable here?)")
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !slices.Contains(b.Tools("everything"), "mcp__everything__echo") {
		t.Skipf("this version of server-everything has no echo tool: %v", b.Tools("everything"))
	}
	e.waitTools([]string{"mcp__everything__echo"}, nil)
	r := e.call("mcp__everything__echo", map[string]any{"message": "hi"})
	if r.State != bus.StateSuccess || !strings.Contains(text(r), "hi") {
		t.Fatalf("echo: %+v", r)
	}
}
