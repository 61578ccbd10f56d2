package readme

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMCPHostCommands: the README's MCP host commands as written: a token
// from `toolbus security token`, the router with --mcp-listen and
// --mcp-tokens, and the Inspector CLI lines (2.12 and 0.22, through npx,
// where node and the npm registry are reachable), then the stdio host's
// `toolbus mcp` line. The README's address 127.0.0.1:8765 becomes a free
// one.
func TestMCPHostCommands(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := shell(t, dir, nil, "go run ./cmd/toolbus security token --name alice-laptop --user alice")
	tok := regexp.MustCompile(`(?m)^token: (\S+)$`).FindStringSubmatch(out)
	entry := out[strings.Index(out, "tokens:"):]
	if code != 0 || tok == nil || !strings.Contains(entry, "sha256:") {
		t.Fatalf("security token: exit %d\n%s\n%s", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.yaml"), []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	line := strings.ReplaceAll(command(t, "go run ./cmd/router --mcp-listen"), "127.0.0.1:8765", addr)
	line += " --listen 127.0.0.1:-1 --data " + filepath.Join(t.TempDir(), "data")
	_, m := background(t, dir, nil, line, regexp.MustCompile(`(?s)serving prefix "toolbus" on (\S+).*MCP \(streamable HTTP\) at`))
	natsURL := m[1]

	t.Run("inspector", func(t *testing.T) {
		if _, err := exec.LookPath("npx"); err != nil {
			t.Skip("npx (node) is not installed: the Inspector commands are not run")
		}
		for _, prefix := range []string{"npx @modelcontextprotocol/inspector@2.12.0", "npx @modelcontextprotocol/inspector@0.22.0"} {
			c := strings.ReplaceAll(command(t, prefix), "127.0.0.1:8765", addr)
			c = strings.ReplaceAll(c, "<token>", tok[1])
			// npm_config_yes: npx installs without asking (no terminal here).
			out, errOut, code := shell(t, dir, []string{"npm_config_yes=true", "npm_config_update_notifier=false"}, c)
			if code != 0 && strings.Contains(errOut, "npm error") && strings.Contains(errOut, "ENOTFOUND") {
				t.Skipf("the npm registry is not reachable: %s", errOut)
			}
			if code != 0 || !strings.Contains(out, `"get_current_time"`) {
				t.Errorf("%s: exit %d\nstdout %s\nstderr %s", prefix, code, out, errOut)
			}
		}
	})

	t.Run("stdio", func(t *testing.T) {
		// The desktop host's configuration: command toolbus, its args.
		b, err := os.ReadFile("../../README.md")
		if err != nil {
			t.Fatal(err)
		}
		cfg := regexp.MustCompile(`(?s)\{"mcpServers": .*?\}\}\}`).Find(b)
		var hosts struct {
			MCPServers map[string]struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal(cfg, &hosts); err != nil {
			t.Fatalf("the README's stdio host configuration: %v\n%s", err, cfg)
		}
		h := hosts.MCPServers["toolbus"]
		args := strings.Join(h.Args, " ")
		if h.Command != "toolbus" || !strings.Contains(args, "--nats nats://127.0.0.1:4222") {
			t.Fatalf("stdio host: %+v", h)
		}
		args = strings.Replace(args, "nats://127.0.0.1:4222", natsURL, 1)
		stdioList(t, filepath.Join(bins(t), "toolbus"), strings.Fields(args))
	})
}

// stdioList runs `toolbus mcp ...` as a stdio host would: initialize, then
// tools/list; the list must hold get_current_time.
func stdioList(t *testing.T, bin string, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(outPipe)
	lines.Buffer(make([]byte, 0, 1<<20), 16<<20)
	send := func(s string) {
		if _, err := io.WriteString(in, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	reply := func(id int) string {
		for lines.Scan() {
			var m struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(lines.Bytes(), &m) == nil && m.ID != nil && *m.ID == id {
				return lines.Text()
			}
		}
		t.Fatalf("no reply %d: %v\nstderr %s", id, lines.Err(), stderr.String())
		return ""
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"readme-test","version":"1"}}}`)
	if r := reply(1); !strings.Contains(r, `"result"`) {
		t.Fatalf("initialize: %s", r)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if r := reply(2); !strings.Contains(r, `"get_current_time"`) {
		t.Fatalf("tools/list: %s", r)
	}
}
