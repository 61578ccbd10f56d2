package facade

import (
	"context"
	"encoding/json"
	"github.com/toolbus/toolbus/mcp/mcptest"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
)

// hostAnswers is a host's elicitation handler that answers with result
// and reports the message it was shown.
type hostAnswers struct {
	result mcp.ElicitationResult
	asked  chan string
}

func (h *hostAnswers) Elicit(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.asked <- r.Params.Message
	res := h.result
	return &res, nil
}

// TestHostAnswersBridgedQuestion: a host that declared elicitation calls
// a bridged tool whose server asks (elicitation/create); the question,
// parked on the bus for the host's user, is put to the host, and its
// answer reaches the server: accepted content, then a decline.
func TestHostAnswersBridgedQuestion(t *testing.T) {
	hostAnswersQuestion(t, mcp.ProtocolVersion20251125)
}

// hostAnswersQuestion: a host at version calls a bridged tool whose server
// asks; the host's answer reaches the server, accepted content then a
// decline.
func hostAnswersQuestion(t *testing.T, version string) {
	e := newEnv(t)
	e.bridgeServer(t, "q", mcptest.AskServer(t))
	if err := e.d.WaitLive(t.Context(), "mcp__q__ask"); err != nil {
		t.Fatal(err)
	}
	h := &hostAnswers{asked: make(chan string, 4), result: mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"name": "Ada"}}}}
	c := e.connect(t, "s1", version, "alice", mcpclient.WithElicitationHandler(h))
	began := time.Now()
	r, err := call(t, c, "mcp__q__ask", map[string]any{}, false)
	if err != nil || r.IsError || textOf(r) != `accept {"name":"Ada"}` {
		t.Fatalf("answered by the host: %+v %v", r, err)
	}
	t.Logf("%s: a call with one question answered: %v", version, time.Since(began))
	if msg := <-h.asked; msg != "The MCP server q asks: Your name, please." {
		t.Fatalf("the host was shown %q", msg)
	}
	h.result = mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}
	r, err = call(t, c, "mcp__q__ask", map[string]any{}, false)
	if err != nil || r.IsError || textOf(r) != "decline null" {
		t.Fatalf("declined by the host: %+v %v", r, err)
	}
}

// TestQuestionFor (relayer.take): only a question of the called tool's server, for the
// session's user, parked as external by a bridge (asked, 1.17), is put to a host, once.
func TestQuestionFor(t *testing.T) {
	s := &relayer{session: "s1", user: "alice"}
	in := func(server, user string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"server": server, "user": user, "mode": "form", "message": "?", "calls": []string{"c"}})
		return b
	}
	for _, tc := range []struct {
		name   string
		p      bus.Parked
		prefix string
		want   bool
	}{
		{"its own", bus.Parked{ID: "p1", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice")}, "q__ask", true},
		{"again", bus.Parked{ID: "p1", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice")}, "q__ask", false},
		{"another user", bus.Parked{ID: "p2", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "bob")}, "q__ask", false},
		{"another server", bus.Parked{ID: "p3", Name: "mcp__r__elicit", Kind: bus.KindExternal, Asked: true, Input: in("r", "alice")}, "q__ask", false},
		{"a server named in the input only", bus.Parked{ID: "p4", Name: "mcp__x__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice")}, "q__ask", false},
		{"a confirmation", bus.Parked{ID: "p5", Name: "mcp__q__elicit", Kind: bus.KindConfirm, Asked: true, Input: in("q", "alice")}, "q__ask", false},
		{"another tool", bus.Parked{ID: "p6", Name: "deploy", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice")}, "q__ask", false},
		{"a server whose name holds __", bus.Parked{ID: "p7", Name: "mcp__a__b__elicit", Kind: bus.KindExternal, Asked: true, Input: in("a__b", "alice")}, "a__b__ask", true},
		{"not asked by a bridge (parked on P.call)", bus.Parked{ID: "p9", Name: "mcp__q__elicit", Kind: bus.KindExternal, Input: in("q", "alice")}, "q__ask", false},
		{"bad input", bus.Parked{ID: "p8", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: json.RawMessage(`[]`)}, "q__ask", false},
	} {
		if _, got := s.take(tc.p, tc.prefix); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FuzzQuestionFor: any parked input is a question or not, never a panic,
// and a question taken is one of the called tool's server, for the
// session's user.
func FuzzQuestionFor(f *testing.F) {
	f.Add("mcp__q__elicit", `{"server":"q","user":"alice","mode":"form","message":"?"}`, "q__ask")
	f.Add("mcp__q__elicit", `{"server":"q","user":{"id":1}}`, "q__ask")
	f.Add("mcp__a__b__elicit", `{"server":"a__b","user":"alice"}`, "a__b__x")
	f.Add("mcp____elicit", `{"server":""}`, "__")
	f.Fuzz(func(t *testing.T, name, input, prefix string) {
		s := &relayer{session: "s1", user: "alice"}
		q, ok := s.take(bus.Parked{ID: "p", Name: name, Kind: bus.KindExternal, Asked: true, Input: json.RawMessage(input)}, prefix)
		if ok && (name != "mcp__"+q.Server+"__elicit" || len(prefix) <= len(q.Server)+1 || prefix[:len(q.Server)+2] != q.Server+"__") {
			t.Fatalf("took %q for %q (prefix %q)", input, name, prefix)
		}
	})
}
