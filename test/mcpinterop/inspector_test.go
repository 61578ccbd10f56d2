package mcpinterop

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/mcp/facade"
)

// inspectorCLI is the MCP Inspector's command (cli/build/cli.js, what
// `npx mcp-inspector` runs) of the installed package pkg.
// inspectorBound bounds one run of the Inspector's CLI (inspector).
const inspectorBound = 3 * bound

func inspectorCLI(t *testing.T, pkg string) string {
	t.Helper()
	return filepath.Join(jsDir(t), "node_modules", pkg, "cli", "build", "cli.js")
}

// inspector runs the Inspector's CLI cli with --cli and args, and decodes
// what it prints into out. Its bound is inspectorBound, not bound: one run
// starts node and, in TestInspectorBridgedLarge, parses and prints a 3 MiB
// result, seconds of CPU that on a loaded CI machine (a burner and other
// packages beside it) took over 30 s of wall time. The bound is there to
// catch a hang, not to time the call.
func inspector(t *testing.T, cli string, out any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), inspectorBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{cli, "--cli"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-inspector %v: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("mcp-inspector %v printed %q: %v", args, stdout.String(), err)
	}
}

// inspectList runs tools/list through the Inspector and returns the
// names, sorted.
func inspectList(t *testing.T, cli string, args ...string) []string {
	t.Helper()
	var list struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	inspector(t, cli, &list, append(args, "--transport", "http", "--method", "tools/list")...)
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// inspectHello calls hello through the Inspector and checks its result.
func inspectHello(t *testing.T, cli string, args ...string) {
	t.Helper()
	var res struct {
		Content []struct {
			Type, Text string
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	inspector(t, cli, &res, append(args, "--transport", "http", "--method", "tools/call", "--tool-name", "hello", "--tool-arg", "name=inspector")...)
	if res.IsError || len(res.Content) != 1 || res.Content[0].Text != "hello inspector" {
		t.Fatalf("tools/call: %+v", res)
	}
}

// TestInspectorCLI: the MCP Inspector's CLI rewrites every URL whose path
// does not end in /mcp to /mcp (dropping the rest of the path and the
// query), so it is given /mcp?session=<s> or /mcp/<s>/mcp. 0.15.0 (the
// version issue 18 names) has no option for HTTP headers, hence no
// bearer token: it reaches an --mcp-insecure facade (loopback only).
// 0.22.0 (the newest 0.x; it asks for node 22 but runs on 20) sends
// --header: the bearer token, and the session in X-Toolbus-Session or the
// query; so does 2.12.0, the newest. Each run is one request: no cancel,
// no elicitation.
func TestInspectorCLI(t *testing.T) {
	jsDir(t)
	t.Run("0.15.0-insecure", func(t *testing.T) {
		cli := inspectorCLI(t, "@modelcontextprotocol/inspector")
		e := startEnv(t, func(c *facade.Config) { c.Auth, c.Insecure = nil, true })
		url := e.base + "/mcp?session=insp1"
		if got := inspectList(t, cli, url); !slices.Equal(got, basicTools) {
			t.Fatalf("tools/list at %s: %v", url, got)
		}
		inspectHello(t, cli, url)
		url = e.base + "/mcp/insp2/mcp"
		if got := inspectList(t, cli, url); !slices.Equal(got, basicTools) {
			t.Fatalf("tools/list at %s: %v", url, got)
		}
	})
	t.Run("0.22.0-token", func(t *testing.T) {
		cli := inspectorCLI(t, "inspector-0.22")
		e := newEnv(t)
		bearer := "Authorization: Bearer " + token
		args := []string{e.base + "/mcp", "--header", bearer, "--header", facade.SessionHeader + ": insp3"}
		if got := inspectList(t, cli, args...); !slices.Equal(got, basicTools) {
			t.Fatalf("tools/list with the session header: %v", got)
		}
		inspectHello(t, cli, args...)
		if got := inspectList(t, cli, e.base+"/mcp?session=insp4", "--header", bearer); !slices.Equal(got, basicTools) {
			t.Fatalf("tools/list with ?session=: %v", got)
		}
	}) // 2.12.0, the newest (2026-12): `npx @modelcontextprotocol/inspector
	// --cli ...` runs its launcher, which forwards everything after --cli to
	// the CLI client; the README's command, as written.
	t.Run("2.12.0-token", func(t *testing.T) {
		cli := filepath.Join(jsDir(t), "node_modules", "inspector-2", "clients", "launcher", "build", "index.js")
		e := newEnv(t)
		args := []string{e.base + "/mcp", "--header", "Authorization: Bearer " + token, "--header", facade.SessionHeader + ": insp5"}
		if got := inspectList(t, cli, args...); !slices.Equal(got, basicTools) {
			t.Fatalf("tools/list with the session header: %v", got)
		}
		inspectHello(t, cli, args...)
	})
}
