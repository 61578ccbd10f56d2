package facade

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// twoPolicies authenticates two credentials of one user, alice, named by
// the test's X-Toolbus-User header (the pair's helpers send it): "alice"
// under host_user (her host), "alice-agent" under approvers (her agent's,
// which must never confirm). The claimed-user check reads another header.
type twoPolicies struct{}

func (twoPolicies) Authenticate(r *http.Request) (Identity, error) {
	switch r.Header.Get("X-Toolbus-User") {
	case "alice":
		return Identity{Name: "host", User: "alice", Sessions: Sessions{"*"}, Confirm: ConfirmHostUser}, nil
	case "alice-agent":
		return Identity{Name: "agent", User: "alice", Sessions: Sessions{"*"}, Confirm: ConfirmApprovers}, nil
	}
	return Identity{}, errors.New("unknown credential")
}

// policiesPair is a pair of facade processes whose credentials are
// twoPolicies', with session s in default mode and the ops group on.
func policiesPair(t *testing.T, s string) *pair {
	t.Helper()
	mod := func(c *Config) {
		c.Auth, c.UserHeader, c.Insecure, c.QuietHold = twoPolicies{}, "X-Claimed-User", false, 2*time.Second
	}
	p := newPairWith(t, false, mod)
	cfg := Config{Poll: p.f.cfg.Poll, ProgressEvery: p.f.cfg.ProgressEvery, Confirm: ConfirmApprovers}
	mod(&cfg)
	b := New(client.New(p.conn(t, "facade"), client.Config{Source: "toolbus/mcp"}), cfg)
	testkit.Stop(t, b.Drain)
	p.backend[1] = b
	if err := p.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	p.resetTools(t, s, map[string]bool{"ops": true})
	return p
}

// TestAttackCrossingAcrossPolicies (session 39, tenth red team's lead): a
// credential of alice under approvers that learns the MCP session id of
// alice's host_user session posts an answer to that session's
// confirmation on the other facade process, which carries it to the one
// that asked. The carried records were keyed by session and user only, so
// the answer confirmed the deploy; now the policy is in the key, and the
// host's own deny, carried after it on the same way, decides.
func TestAttackCrossingAcrossPolicies(t *testing.T) {
	s := "lb-policies"
	p := policiesPair(t, s)
	sid := p.initializeWith(t, "A", s, "alice", `{"elicitation":{}}`)
	// The host's deploy asks its user on A.
	msgs := p.stream(t, "A", s, "alice", sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"deploy","arguments":{}}}`)
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
	answer := func(user, decision string) int {
		resp := p.do(t, "B", s, user, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"decision":%q}}}`, asked.ID, decision))
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// The agent's credential answers allow on B (carried, or not); then the
	// host denies on B, carried after it to A.
	if code := answer("alice-agent", choiceAllow); code >= 500 {
		t.Fatalf("the agent's answer: HTTP %d", code)
	}
	if code := answer("alice", choiceDeny); code != http.StatusAccepted {
		t.Fatalf("the host's answer on B: HTTP %d", code)
	}
	for m := range msgs {
		if m.Result != nil {
			if strings.Contains(string(m.Result), "deployed") {
				t.Fatalf("a credential under approvers confirmed the host_user session's deploy: %s", m.Result)
			}
			return
		}
	}
	t.Fatal("the deploy's stream ended without a result")
}

// TestAttackTaskUpdateAcrossPolicies (session 39, beside the crossing): the
// same credential under approvers, given the id of a task of alice's host
// waiting for her confirmation (input_required), answers it with
// tasks/update. The task records are keyed by session and user, and a
// task's confirmation is its host's to give: refused, the task still waits.
func TestAttackTaskUpdateAcrossPolicies(t *testing.T) {
	s := "task-policies"
	p := policiesPair(t, s)
	id := p.startTask(t, "A", s, "deploy")
	d := p.pollTask(t, "B", s, id, mcp.TaskStatusInputRequired)
	responses := map[string]any{}
	for k := range d.InputRequests {
		responses[k] = map[string]any{"action": "accept", "content": map[string]any{"decision": choiceAllow}}
	}
	if len(responses) != 1 {
		t.Fatalf("input requests: %+v", d.InputRequests)
	}
	for _, backend := range []string{"A", "B"} {
		_, _ = p.rpc(t, backend, s, "alice-agent", "tasks/update", map[string]any{"taskId": id, "inputResponses": responses}, true)
	}
	// The host then denies: the task fails or completes denied, never deployed.
	if _, rerr := p.rpc(t, "A", s, "alice", "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{firstKey(d.InputRequests): map[string]any{"action": "accept", "content": map[string]any{"decision": choiceDeny}}}}, true); rerr != nil {
		t.Fatalf("the host's tasks/update: %+v", rerr)
	}
	d = p.pollTask(t, "A", s, id, mcp.TaskStatusCompleted)
	if text, _ := resultText(t, d.Result); text == "deployed" {
		t.Fatalf("a credential under approvers confirmed the host's task: %s", d.Result)
	}
}

func firstKey[V any](m map[string]V) string {
	for k := range m {
		return k
	}
	return ""
}

// TestAttackRetryAcrossPolicies (session 39, beside the crossing: held):
// the same credential under approvers, given the request state of a
// 2026-07-28 call of alice's host waiting for her confirmation, retries the
// call with "allow" on either process. States are keyed by session and
// user, but a confirmation is answered only under host_user
// (ask.answerable): the retry answers nothing and is told the call is
// still waiting, and the host's own retry then denies it.
func TestAttackRetryAcrossPolicies(t *testing.T) {
	s := "retry-policies"
	p := policiesPair(t, s)
	call := func(user, backend string, extra map[string]any) (json.RawMessage, *rpcError) {
		params := map[string]any{"name": "deploy", "arguments": map[string]any{}}
		maps.Copy(params, extra)
		return p.rpc(t, backend, s, user, "tools/call", params, true)
	}
	res, rerr := call("alice", "A", nil)
	var ir inputRequired
	if rerr != nil || json.Unmarshal(res, &ir) != nil || ir.ResultType != "input_required" || len(ir.InputRequests) != 1 {
		t.Fatalf("the host's deploy: %s %+v", res, rerr)
	}
	with := func(decision string) map[string]any {
		in := map[string]any{}
		for k := range ir.InputRequests {
			in[k] = map[string]any{"action": "accept", "content": map[string]any{"decision": decision}}
		}
		return map[string]any{"requestState": ir.RequestState, "inputResponses": in}
	}
	for _, backend := range []string{"B", "A"} {
		res, rerr := call("alice-agent", backend, with(choiceAllow))
		if text, isErr := resultText(t, res); rerr != nil || !isErr || !strings.Contains(text, "still waiting for a confirmation") {
			t.Fatalf("the agent's retry on %s: %s %+v", backend, res, rerr)
		}
	}
	res, rerr = call("alice", "B", with(choiceDeny))
	if text, _ := resultText(t, res); rerr != nil || text == "deployed" {
		t.Fatalf("the host's deny: %s %+v", res, rerr)
	}
}
