package facade

import (
	"encoding/json"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/mcp/mcptest"
)

// TestModernHostAnswersBridgedQuestion: a 2026-07-28 host (mcp-go's
// client, which answers input_required with its elicitation handler and
// retries) calls a bridged tool whose server asks; the call ends with
// input_required carrying the question, the retry's answer reaches the
// server and the retry returns the tool's result: accepted content, then
// a decline.
func TestModernHostAnswersBridgedQuestion(t *testing.T) {
	e := newEnv(t)
	e.bridgeServer(t, "q", mcptest.AskServer(t))
	if err := e.d.WaitLive(t.Context(), "mcp__q__ask"); err != nil {
		t.Fatal(err)
	}
	h := &hostAnswers{asked: make(chan string, 4), result: mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"name": "Ada"}}}}
	c := e.connect(t, "s1", mcp.ProtocolVersion20260728, "alice", mcpclient.WithElicitationHandler(h))
	r, err := call(t, c, "mcp__q__ask", map[string]any{}, false)
	if err != nil || r.IsError || textOf(r) != `accept {"name":"Ada"}` {
		t.Fatalf("answered by the host: %+v %v", r, err)
	}
	if msg := <-h.asked; msg != "The MCP server q asks: Your name, please." {
		t.Fatalf("the host was shown %q", msg)
	}
	h.result = mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}
	r, err = call(t, c, "mcp__q__ask", map[string]any{}, false)
	if err != nil || r.IsError || textOf(r) != "decline null" {
		t.Fatalf("declined by the host: %+v %v", r, err)
	}
}

// TestQuestionOf: a 2026-07-28 host is asked only a question of its own
// bus call, of the called tool's server, for its user.
func TestQuestionOf(t *testing.T) {
	in := func(server, user string, calls ...string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"server": server, "user": user, "mode": "form", "message": "?", "calls": calls})
		return b
	}
	for _, tc := range []struct {
		name       string
		p          bus.Parked
		tool, call string
		want       bool
	}{
		{"its own", bus.Parked{ID: "p1", Name: "mcp__q__elicit", Kind: bus.KindExternal, Input: in("q", "alice", "c1")}, "mcp__q__ask", "c1", true},
		{"one of the asking calls", bus.Parked{ID: "p1", Name: "mcp__q__elicit", Kind: bus.KindExternal, Input: in("q", "alice", "c0", "c1")}, "mcp__q__ask", "c1", true},
		{"another call of the user", bus.Parked{ID: "p2", Name: "mcp__q__elicit", Kind: bus.KindExternal, Input: in("q", "alice", "c2")}, "mcp__q__ask", "c1", false},
		{"no calls", bus.Parked{ID: "p2", Name: "mcp__q__elicit", Kind: bus.KindExternal, Input: in("q", "alice")}, "mcp__q__ask", "c1", false},
		{"another user's call", bus.Parked{ID: "p3", Name: "mcp__q__elicit", Kind: bus.KindExternal, Input: in("q", "bob", "c1")}, "mcp__q__ask", "c1", false},
		{"another server", bus.Parked{ID: "p4", Name: "mcp__r__elicit", Kind: bus.KindExternal, Input: in("r", "alice", "c1")}, "mcp__q__ask", "c1", false},
		{"not a bridged tool", bus.Parked{ID: "p5", Name: "mcp__q__elicit", Kind: bus.KindExternal, Input: in("q", "alice", "c1")}, "deploy", "c1", false},
		{"a confirmation", bus.Parked{ID: "p6", Name: "mcp__q__elicit", Kind: bus.KindConfirm, Input: in("q", "alice", "c1")}, "mcp__q__ask", "c1", false},
	} {
		if _, got := questionOf(tc.p, tc.tool, tc.call, "alice"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHostAnswer: what a host's response publishes on the question's park.
func TestHostAnswer(t *testing.T) {
	res := func(a mcp.ElicitationResponseAction, content any) *mcp.ElicitationResult {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: a, Content: content}}
	}
	for _, tc := range []struct {
		name string
		res  *mcp.ElicitationResult
		want string
		ok   bool
	}{
		{"accept", res(mcp.ElicitationResponseActionAccept, map[string]any{"name": "Ada"}), `{"action":"accept","content":{"name":"Ada"}}`, true},
		{"accept without content", res(mcp.ElicitationResponseActionAccept, nil), `{"action":"accept"}`, true},
		{"decline", res(mcp.ElicitationResponseActionDecline, map[string]any{"x": 1}), `{"action":"decline"}`, true},
		{"cancel: left on the bus", res(mcp.ElicitationResponseActionCancel, nil), "", false},
		{"unknown action", res("maybe", nil), "", false},
		{"none", nil, "", false},
	} {
		got, ok := hostAnswer(tc.res)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q %v, want %q %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestQuestionParams: a question becomes the elicitation the host is
// shown; a URL question needs URL elicitation, a schema must be an object.
func TestQuestionParams(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    question
		url  bool
		ok   bool
	}{
		{"form", question{Server: "q", Mode: "form", Message: "?", RequestedSchema: json.RawMessage(`{"type":"object"}`)}, false, true},
		{"form without a schema", question{Server: "q", Mode: "form", Message: "?"}, false, true},
		{"a schema that is no object", question{Server: "q", Mode: "form", Message: "?", RequestedSchema: json.RawMessage(`[1]`)}, false, false},
		{"null schema", question{Server: "q", Mode: "form", Message: "?", RequestedSchema: json.RawMessage(`null`)}, false, false},
		{"url to a url host", question{Server: "q", Mode: "url", Message: "?", URL: "https://x"}, true, true},
		{"url to a form host", question{Server: "q", Mode: "url", Message: "?", URL: "https://x"}, false, false},
	} {
		p, ok := questionParams(tc.q, tc.url)
		if ok != tc.ok {
			t.Errorf("%s: %v, want %v", tc.name, ok, tc.ok)
		}
		if ok && !strings.HasPrefix(p.Message, "The MCP server q asks: ") {
			t.Errorf("%s: message %q", tc.name, p.Message)
		}
	}
}
