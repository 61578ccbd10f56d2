package security

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/security"
)

const (
	hostToken   = "token-of-alice-desktop-0001"
	sharedToken = "token-of-bob-shared-000002"
)

// loadTokens loads a token file holding text.
func loadTokens(t *testing.T, text string) *facade.Tokens {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	must(t, os.WriteFile(path, []byte(text), 0o600))
	tk, err := facade.LoadTokens(path)
	must(t, err)
	return tk
}

// mcpFacade serves the facade over HTTP, logged in as the generated
// facade user, with two tokens: alice (session s1, host_user) and bob
// (session s3, approvers); the harness binds s1 to alice and s3 to bob.
func (d *deployment) mcpFacade(t *testing.T) (url string, l *login) {
	t.Helper()
	tk := loadTokens(t, "tokens:\n"+
		"- {name: alice, token: "+facade.HashToken(hostToken)+", user: alice, sessions: [s1], confirm: host_user}\n"+
		"- {name: bob, token: "+facade.HashToken(sharedToken)+", user: bob, sessions: [s3], confirm: approvers}\n")
	l = d.conn(security.RoleFacade)
	f := facade.New(client.New(l.nc, client.Config{Source: "toolbus/mcp"}), facade.Config{Auth: tk, Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(func() { hs.Close(); f.Drain(testkit.StopContext(t)) })
	return hs.URL, l
}

// hostDecides is a host's user who allows every confirmation it is asked.
type hostDecides struct{ asked chan string }

func (h *hostDecides) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.asked <- req.Params.Message
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"decision": "allow"}}}, nil
}

func mcpConnect(t *testing.T, url, token string, el mcpclient.ElicitationHandler) *mcpclient.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}),
		transport.WithHTTPLogger(slog.New(slog.DiscardHandler)))
	must(t, err)
	c := mcpclient.NewClient(tr, mcpclient.WithElicitationHandler(el), mcpclient.WithLegacyProtocolOnly())
	must(t, c.Start(t.Context()))
	t.Cleanup(func() { _ = c.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	_, err = c.Initialize(t.Context(), req)
	must(t, err)
	return c
}

func mcpCall(t *testing.T, c *mcpclient.Client, name string) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, map[string]any{}
	r, err := c.CallTool(testCtx(t), req)
	must(t, err)
	return r
}

func mcpText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestFacadeIdentity: the MCP facade on the generated configuration acts
// as the facade user, never the router. Without a token: 401; a token
// for another session: 403; with a token, calls run and the host_user
// host confirms its own call through elicitation, while under approvers
// the host is not asked and an approver confirms. Everything it did
// stayed within the facade's permissions, and the facade's login cannot
// do what the router can: exec, register, admin verbs, JetStream
// administration, writing KV or skills, reading confirmations, external
// requests or other roles' inboxes.
func TestFacadeIdentity(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	url, fl := d.mcpFacade(t)

	post := func(path, token string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+path,
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		must(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	if resp := post("/mcp/s1", ""); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: HTTP %d", resp.StatusCode)
	}
	if resp := post("/mcp/s2", hostToken); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("alice's token for s2: HTTP %d", resp.StatusCode)
	}

	// host_user: alice's host confirms her own call.
	alice := &hostDecides{asked: make(chan string, 4)}
	ac := mcpConnect(t, url+"/mcp/s1", hostToken, alice)
	if r := mcpCall(t, ac, "greet"); r.IsError || mcpText(r) != "hello" {
		t.Fatalf("greet: %+v", r)
	}
	if r := mcpCall(t, ac, "deploy"); r.IsError || mcpText(r) != "deployed" {
		t.Fatalf("deploy confirmed by alice's host: %+v", r)
	}
	testkit.Recv(t, alice.asked, bound, "alice's elicitation")

	// approvers: bob's host is not asked; the approver confirms.
	bob := &hostDecides{asked: make(chan string, 4)}
	bc := mcpConnect(t, url+"/mcp/s3", sharedToken, bob)
	res := make(chan *mcp.CallToolResult, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "deploy"
		r, _ := bc.CallTool(testCtx(t), req)
		res <- r
	}()
	ap := d.conn("approver")
	req := readHandoff(t, ap, "toolbus.confirm.deploy")
	if req.SessionID != "s3" {
		t.Fatalf("confirmation of session %s", req.SessionID)
	}
	yes := true
	must(t, ap.client().Parked().Confirm(testCtx(t), "deploy", req.SessionID, req.ReplyID, req.ToolCallID, bus.Answer{Confirmed: &yes, InputDigest: digestOf(t, req)}))
	if r := testkit.Recv(t, res, bound, "bob's deploy"); r == nil || r.IsError || mcpText(r) != "deployed" {
		t.Fatalf("deploy confirmed by the approver: %+v", r)
	}
	if len(bob.asked) != 0 {
		t.Fatal("bob's host was asked under approvers")
	}
	fl.noViolations()

	for _, s := range []string{"toolbus.exec.greet", "toolbus.exec.deploy", "toolbus.register", "toolbus.register.greet", "toolbus.admin.status",
		"toolbus.admin.session.mode", "toolbus.admin.parked.list", "toolbus.result.greet", "toolbus.events.s1",
		"$KV.toolbus_sessions.s1", "$KV.toolbus_tools.greet", "$O.toolbus_skills.C.x", "$JS.API.STREAM.DELETE.TOOLBUS_EVENTS",
		"$JS.API.STREAM.PURGE.KV_toolbus_sessions", "$JS.API.CONSUMER.CREATE.KV_toolbus_parked.x.$KV.toolbus_parked.>",
		"$JS.API.STREAM.MSG.GET.KV_toolbus_sessions", "_INBOX.router.x"} {
		fl.denyPublish(s)
	}
	for _, s := range []string{"toolbus.exec.>", "toolbus.call.>", "toolbus.confirm.>", "toolbus.external.>", "_INBOX.>",
		"_INBOX.router.>", "_INBOX.approver.>", "$SRV.>"} {
		fl.denySubscribe(s)
	}
}

// TestFacadeBindingRefused403: a facade identity whose user is not the
// session's bound user (mallory's token grants s1, which is bound to
// alice) is refused by the router; the host gets 403 with the reason,
// not 503 (which says "try again").
func TestFacadeBindingRefused403(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	const malloryToken = "token-of-mallory-000000003"
	tk := loadTokens(t, "tokens:\n- {name: mallory, token: "+facade.HashToken(malloryToken)+", user: mallory, sessions: [s1]}\n")
	f := facade.New(client.New(d.conn(security.RoleFacade).nc, client.Config{Source: "toolbus/mcp"}), facade.Config{Auth: tk, Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(func() { hs.Close(); f.Drain(testkit.StopContext(t)) })
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, hs.URL+"/mcp/s1", strings.NewReader(body))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+malloryToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "alice") {
		t.Fatalf("mallory on s1 (bound to alice): %d %s, want 403 naming the binding", resp.StatusCode, b)
	}
}
