package facade

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// twoPolicies authenticates two tokens of one user, alice: "host" under
// host_user, "agent" under approvers.
type twoPolicies struct{}

func (twoPolicies) Authenticate(r *http.Request) (Identity, error) {
	switch r.Header.Get("Authorization") {
	case "Bearer host":
		return Identity{Name: "host", User: "alice", Sessions: Sessions{"*"}, Confirm: ConfirmHostUser}, nil
	case "Bearer agent":
		return Identity{Name: "agent", User: "alice", Sessions: Sessions{"*"}, Confirm: ConfirmApprovers}, nil
	}
	return Identity{}, errors.New("unknown token")
}

// TestAttackCrossingAcrossPolicies (session 39, tenth red team's lead): a
// token of alice under approvers, which may never confirm, that learns the
// MCP session id of alice's host_user session posts an answer to that
// session's confirmation on the other facade process, which carries it to
// the one that asked. The carried records were keyed by session and user
// only, so the answer confirmed the deploy; now the policy is in the key,
// and the host's own deny, carried after it on the same way, decides.
func TestAttackCrossingAcrossPolicies(t *testing.T) {
	p := newPairWith(t, false, func(c *Config) { c.Auth = twoPolicies{} })
	b := New(client.New(p.conn(t, "facade"), client.Config{Source: "toolbus/mcp"}),
		Config{Poll: p.f.cfg.Poll, ProgressEvery: p.f.cfg.ProgressEvery, Auth: twoPolicies{}, Confirm: ConfirmApprovers})
	testkit.Stop(t, b.Drain)
	p.backend[1] = b
	s := "lb-policies"
	if err := p.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	p.resetTools(t, s, map[string]bool{"ops": true})
	as := func(token string, r *http.Request) *http.Request {
		r.Header.Del("X-Toolbus-User")
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	do := func(token, backend, sid, body string) *http.Response {
		resp, err := http.DefaultClient.Do(as(token, p.request(t, backend, s, "", sid, body)))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	post := func(token, backend, sid, body string) int {
		resp := do(token, backend, sid, body)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	resp := do("host", "A", "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,`+
		`"capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}`, mcp.ProtocolVersion20251125))
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: HTTP %d", resp.StatusCode)
	}
	if code := post("host", "A", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: HTTP %d", code)
	}
	// The host's deploy asks its user on A.
	call := do("host", "A", sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"deploy","arguments":{}}}`)
	if call.StatusCode != http.StatusOK {
		t.Fatalf("tools/call: HTTP %d", call.StatusCode)
	}
	msgs := p.streamOf(t, call)
	var asked streamMsg
	for m := range msgs {
		if m.Method == "elicitation/create" {
			asked = m
			break
		}
	}
	if asked.ID == nil {
		t.Fatal("the deploy ended without asking its host")
	}
	answer := func(decision string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"decision":%q}}}`, asked.ID, decision)
	}
	// The approvers' token answers allow on B (carried, or refused); then the
	// host denies on B, carried after it to A.
	if code := post("agent", "B", sid, answer(choiceAllow)); code >= 500 {
		t.Fatalf("the agent's answer: HTTP %d", code)
	}
	if code := post("host", "B", sid, answer(choiceDeny)); code != http.StatusAccepted {
		t.Fatalf("the host's answer on B: HTTP %d", code)
	}
	for m := range msgs {
		if m.Result != nil {
			if strings.Contains(string(m.Result), "deployed") {
				t.Fatalf("a token under approvers confirmed the host_user session's deploy: %s", m.Result)
			}
			return
		}
	}
	t.Fatal("the deploy's stream ended without a result")
}
