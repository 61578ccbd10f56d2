package mcpinterop

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/mcp/facade"
)

// inspector runs the MCP Inspector's CLI (0.15.0, pinned in js/) with
// args and decodes what it prints.
func inspector(t *testing.T, out any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t, "mcp-inspector"), append([]string{"--cli"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-inspector %v: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("mcp-inspector %v printed %q: %v", args, stdout.String(), err)
	}
}

// TestInspectorCLI: the MCP Inspector's CLI rewrites every URL whose path
// does not end in /mcp to /mcp (dropping the query), and 0.15.0 has no
// option for HTTP headers, so no bearer token: it reaches an --mcp-insecure
// facade (loopback) at /mcp?session=<s> and at /mcp/<s>/mcp, lists and
// calls. It is one request per run: no cancel, no elicitation.
func TestInspectorCLI(t *testing.T) {
	jsDir(t)
	e := startEnv(t, func(c *facade.Config) { c.Auth, c.Insecure = nil, true })
	for _, url := range []string{e.base + "/mcp?session=insp1", e.base + "/mcp/insp2/mcp"} {
		t.Run(url[len(e.base):], func(t *testing.T) {
			var list struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			}
			inspector(t, &list, url, "--transport", "http", "--method", "tools/list")
			var names []string
			for _, tool := range list.Tools {
				names = append(names, tool.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"hello", "reset_tools", "wait"}) {
				t.Fatalf("tools/list: %v", names)
			}
			var res struct {
				Content []struct {
					Type, Text string
				} `json:"content"`
				IsError bool `json:"isError"`
			}
			inspector(t, &res, url, "--transport", "http", "--method", "tools/call", "--tool-name", "hello", "--tool-arg", "name=inspector")
			if res.IsError || len(res.Content) != 1 || res.Content[0].Text != "hello inspector" {
				t.Fatalf("tools/call: %+v", res)
			}
		})
	}
}
