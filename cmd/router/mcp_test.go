package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
)

// TestMCPFlags: the facade refuses to serve unauthenticated but on
// loopback with --mcp-insecure, never logs in with the router's
// credentials, and defaults its confirm policy by address.
func TestMCPFlags(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n- {token: a-token-of-sixteen-chars, user: alice, sessions: [s1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    mcpOptions
		want string // "" accepted, else part of the error
	}{
		{mcpOptions{listen: "127.0.0.1:0"}, "requires authentication"},
		{mcpOptions{listen: "0.0.0.0:0", insecure: true}, "only a loopback address"},
		{mcpOptions{listen: "127.0.0.1:0", insecure: true}, ""},
		{mcpOptions{listen: "0.0.0.0:0", tokens: tokens}, ""},
		{mcpOptions{listen: "0.0.0.0:0", tokens: tokens, insecure: true}, "no authentication"},
		{mcpOptions{listen: "0.0.0.0:0", tokens: tokens, issuer: "https://i"}, "choose one"},
		{mcpOptions{listen: "0.0.0.0:0", issuer: "https://i"}, "needs all of"},
		{mcpOptions{listen: "0.0.0.0:0", tokens: filepath.Join(dir, "none")}, "no such file"},
	} {
		_, _, err := c.o.auth(t.Context())
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	for _, c := range []struct {
		listen, confirm string
		authenticated   bool
		want            facade.Confirm
	}{
		{"0.0.0.0:8080", "", true, facade.ConfirmApprovers},
		{"127.0.0.1:8080", "", true, facade.ConfirmHostUser},
		{"127.0.0.1:8080", "", false, facade.ConfirmHostUser},
		{"0.0.0.0:8080", "host_user", true, facade.ConfirmHostUser},
	} {
		o := mcpOptions{listen: c.listen, confirm: c.confirm}
		if got, err := o.policy(c.authenticated); err != nil || got != c.want {
			t.Errorf("%s %q auth=%v: %s %v, want %s", c.listen, c.confirm, c.authenticated, got, err, c.want)
		}
	}
	if _, err := (&mcpOptions{confirm: "anyone"}).policy(true); err == nil {
		t.Error("--mcp-confirm anyone accepted")
	}

	// The facade's login.
	o := &mcpOptions{}
	if _, err := o.conn(natsconn.Config{URLs: "nats://x", NKey: "router.nk"}, ""); err == nil || !strings.Contains(err.Error(), "router's credentials") {
		t.Fatalf("the router's nkey for the facade: %v", err)
	}
	if c, err := o.conn(natsconn.Config{URLs: "nats://x"}, ""); err != nil || c.URLs != "nats://x" || c.NKey != "" {
		t.Fatalf("open NATS: %+v %v", c, err)
	}
	o.nkey = "facade.nk"
	if c, err := o.conn(natsconn.Config{URLs: "nats://x", NKey: "router.nk"}, ""); err != nil || c.NKey != "facade.nk" || c.InboxPrefix != "_INBOX.facade" {
		t.Fatalf("--mcp-nkey: %+v %v", c, err)
	}
	sec := filepath.Join(dir, "secure")
	if _, err := (&mcpOptions{}).conn(natsconn.Config{NKey: security.SeedFile(sec, security.RoleRouter)}, sec); err == nil || !strings.Contains(err.Error(), "no facade user") {
		t.Fatalf("a secure dir without the facade user: %v", err)
	}
	if _, err := security.Generate(sec, "", security.Spec{}); err != nil {
		t.Fatal(err)
	}
	if c, err := (&mcpOptions{}).conn(natsconn.Config{NKey: security.SeedFile(sec, security.RoleRouter)}, sec); err != nil ||
		c.NKey != security.SeedFile(sec, security.RoleFacade) || c.InboxPrefix != "_INBOX.facade" {
		t.Fatalf("--secure: %+v %v", c, err)
	}
}

// TestSecureMCP: router --secure --mcp-listen --mcp-tokens serves the
// facade on the generated facade user: no token gets 401, a token's
// call runs; a secure directory without the facade user is refused at
// start.
func TestSecureMCP(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n- {token: "+facade.HashToken("a-token-of-sixteen-chars")+", user: alice, sessions: [s1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, stderr := startRun(t, []string{"--secure", filepath.Join(dir, "secure"), "--listen", "127.0.0.1:-1", "--data", filepath.Join(dir, "data"),
		"--heartbeat", "500ms", "--mcp-listen", "127.0.0.1:0", "--mcp-tokens", tokens},
		regexp.MustCompile(`MCP \(streamable HTTP\) at (http://\S+)/mcp/<session> \(confirmations: host_user\)`))
	base := m[1]
	// With identities, the facade's user for s1 must be the session's
	// bound user (docs/mcp.md); bind it, as an operator would, and the
	// running router picks it up.
	if _, err := security.AddAgent(filepath.Join(dir, "secure"), "s1", "alice"); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(stderr.String(), "identities reloaded") {
			return errors.New("the router has not loaded the new agent yet")
		}
		return nil
	})
	resp, err := http.Post(base+"/mcp/s1", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: HTTP %d", resp.StatusCode)
	}
	tr, err := transport.NewStreamableHTTP(base+"/mcp/s1", transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer a-token-of-sixteen-chars"}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, mcpclient.WithLegacyProtocolOnly())
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	var r *mcp.CallToolResult
	testkit.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error { // the built-in worker registers, the binding loads
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "echo", map[string]any{"text": "hi"}
		if r, err = c.CallTool(t.Context(), req); err == nil && r.IsError {
			err = fmt.Errorf("echo: %+v", r.Content)
		}
		return err
	})
	if r.IsError || len(r.Content) == 0 {
		t.Fatalf("echo through the facade: %+v", r)
	}

	// Refused before anything starts.
	for _, args := range [][]string{{"--mcp-listen", "0.0.0.0:0", "--mcp-insecure"}, {"--mcp-listen", "127.0.0.1:0"},
		{"--mcp-listen", "127.0.0.1:0", "--mcp-insecure", "--mcp-confirm", "anyone"}} {
		if err := run(t.Context(), args, &testkit.Buffer{}, &testkit.Buffer{}); err == nil {
			t.Errorf("%v: started", args)
		}
	}

	// A secure directory from before the facade user.
	old := filepath.Join(dir, "old")
	if _, err := security.Generate(old, "", security.Spec{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(security.SeedFile(old, security.RoleFacade)); err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), []string{"--secure", old, "--listen", "127.0.0.1:-1", "--data", filepath.Join(dir, "data2"),
		"--mcp-listen", "127.0.0.1:0", "--mcp-tokens", tokens}, &testkit.Buffer{}, &testkit.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no facade user") {
		t.Fatalf("an old secure directory: %v", err)
	}
}

// TestMCPIdleConnections (session 32, red team's gap): the facade closes
// a connection idle between requests, so a client without a token that
// sent one request cannot hold its connections for good.
func TestMCPIdleConnections(t *testing.T) {
	defer func(d time.Duration) { mcpIdleTimeout = d }(mcpIdleTimeout)
	mcpIdleTimeout = 200 * time.Millisecond
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n- {token: "+facade.HashToken("a-token-of-sixteen-chars")+", user: alice, sessions: [s1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, _ := startRun(t, []string{"--listen", "127.0.0.1:-1", "--data", filepath.Join(dir, "data"), "--heartbeat", "500ms",
		"--mcp-listen", "127.0.0.1:0", "--mcp-tokens", tokens}, regexp.MustCompile(`MCP \(streamable HTTP\) at http://(\S+)/mcp/<session>`))
	testkit.IdleClosed(t, m[1], "POST /mcp/s1 HTTP/1.1\r\nHost: "+m[1]+"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", http.StatusUnauthorized)
}
