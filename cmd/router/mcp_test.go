package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
