package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp/mcptest"
)

// TestModernHostAnswersBridgedQuestion: a 2026-07-28 host (mcp-go's
// client, which answers input_required with its elicitation handler and
// retries) calls a bridged tool whose server asks; the call ends with
// input_required carrying the question, the retry's answer reaches the
// server and the retry returns the tool's result: accepted content, then
// a decline.
func TestModernHostAnswersBridgedQuestion(t *testing.T) {
	hostAnswersQuestion(t, mcp.ProtocolVersion20260728)
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
		{"its own", bus.Parked{ID: "p1", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice", "c1")}, "mcp__q__ask", "c1", true},
		{"one of the asking calls", bus.Parked{ID: "p1", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice", "c0", "c1")}, "mcp__q__ask", "c1", true},
		{"another call of the user", bus.Parked{ID: "p2", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice", "c2")}, "mcp__q__ask", "c1", false},
		{"no calls", bus.Parked{ID: "p2", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice")}, "mcp__q__ask", "c1", false},
		{"another user's call", bus.Parked{ID: "p3", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "bob", "c1")}, "mcp__q__ask", "c1", false},
		{"another server", bus.Parked{ID: "p4", Name: "mcp__r__elicit", Kind: bus.KindExternal, Asked: true, Input: in("r", "alice", "c1")}, "mcp__q__ask", "c1", false},
		{"not a bridged tool", bus.Parked{ID: "p5", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: in("q", "alice", "c1")}, "deploy", "c1", false},
		{"a confirmation", bus.Parked{ID: "p6", Name: "mcp__q__elicit", Kind: bus.KindConfirm, Asked: true, Input: in("q", "alice", "c1")}, "mcp__q__ask", "c1", false},
		{"not asked by a bridge (parked on P.call)", bus.Parked{ID: "p7", Name: "mcp__q__elicit", Kind: bus.KindExternal, Input: in("q", "alice", "c1")}, "mcp__q__ask", "c1", false},
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
		q    bus.Question
		url  bool
		ok   bool
	}{
		{"form", bus.Question{Server: "q", Mode: "form", Message: "?", RequestedSchema: json.RawMessage(`{"type":"object"}`)}, false, true},
		{"form without a schema", bus.Question{Server: "q", Mode: "form", Message: "?"}, false, true},
		{"a schema that is no object", bus.Question{Server: "q", Mode: "form", Message: "?", RequestedSchema: json.RawMessage(`[1]`)}, false, false},
		{"null schema", bus.Question{Server: "q", Mode: "form", Message: "?", RequestedSchema: json.RawMessage(`null`)}, false, false},
		{"url to a url host", bus.Question{Server: "q", Mode: "url", Message: "?", URL: "https://x"}, true, true},
		{"url to a form host", bus.Question{Server: "q", Mode: "url", Message: "?", URL: "https://x"}, false, false},
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

// askTwiceServer is an mcp-go server over streamable HTTP whose tool
// ask2 asks its client for a name, then for a colour, and returns
// "<name> <colour>" (a decline or cancel ends it with "<action> at <n>").
func askTwiceServer(t *testing.T) string {
	t.Helper()
	s := server.NewMCPServer("asker2", "1", server.WithElicitation())
	s.AddTool(mcp.NewTool("ask2", mcp.WithDescription("Asks twice."), mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var got []string
			for i, field := range []string{"name", "colour"} {
				r, err := s.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{Message: "Your " + field + ", please.",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{field: map[string]any{"type": "string"}},
						"required": []string{field}}}})
				if err != nil {
					return mcp.NewToolResultError("elicitation failed: " + err.Error()), nil
				}
				if r.Action != mcp.ElicitationResponseActionAccept {
					return mcp.NewToolResultText(fmt.Sprintf("%s at %d", r.Action, i+1)), nil
				}
				c, _ := r.Content.(map[string]any)
				v, _ := c[field].(string)
				got = append(got, v)
			}
			return mcp.NewToolResultText(strings.Join(got, " ")), nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// TestQuestionRetryOtherFacade: mcp-go's 2026-07-28 client behind the
// alternating address calls a bridged tool that asks twice: each round's
// retry reaches the other process, which publishes the answer, waits for
// the call on the bus (a router's replay) and returns the next question,
// then the tool's result.
func TestQuestionRetryOtherFacade(t *testing.T) {
	p := newPair(t, false)
	p.bridgeServer(t, "q2", askTwiceServer(t))
	if err := p.d.WaitLive(t.Context(), "mcp__q2__ask2"); err != nil {
		t.Fatal(err)
	}
	answers := map[string]map[string]any{"The MCP server q2 asks: Your name, please.": {"name": "Ada"},
		"The MCP server q2 asks: Your colour, please.": {"colour": "teal"}}
	h := &scriptedHost{answers: answers, asked: make(chan string, 4)}
	env := *p.env
	env.url = p.url
	c := env.connect(t, "lb-q", mcp.ProtocolVersion20260728, "alice", mcpclient.WithElicitationHandler(h))
	began := time.Now()
	r, err := call(t, c, "mcp__q2__ask2", map[string]any{}, false)
	t.Logf("a call with two questions, three requests on alternating processes: %v", time.Since(began))
	if err != nil || r.IsError || textOf(r) != "Ada teal" {
		t.Fatalf("two rounds on two processes: %+v %v", r, err)
	}
	if got := []string{<-h.asked, <-h.asked}; got[0] != "The MCP server q2 asks: Your name, please." || !strings.Contains(got[1], "colour") {
		t.Fatalf("the host was asked %q", got)
	}
	if by := p.servedBy("tools/call"); len(by) != 3 || by[0] == by[1] || by[1] == by[2] {
		t.Fatalf("tools/call and its retries served by %v, want alternating processes", by)
	}
}

// scriptedHost answers each message it is shown with its content.
type scriptedHost struct {
	answers map[string]map[string]any
	asked   chan string
}

func (h *scriptedHost) Elicit(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.asked <- r.Params.Message
	c, ok := h.answers[r.Params.Message]
	if !ok {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, nil
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: c}}, nil
}

// inputRequired is an input_required result as a raw client reads it.
type inputRequired struct {
	ResultType    string `json:"resultType"`
	RequestState  string `json:"requestState"`
	InputRequests map[string]struct {
		Method string `json:"method"`
		Params struct {
			Message string `json:"message"`
		} `json:"params"`
	} `json:"inputRequests"`
}

// TestQuestionStateRefused (raw JSON-RPC over HTTP at 2026-07-28): a
// question's request state is honoured only for its session and user, on
// either process; a forged, malformed, another user's or another
// session's one, and one superseded by the next round, are refused and
// publish nothing (the question stays parked); a cancel leaves the
// question on the bus; the real retries on the other process decline the
// second question, which reaches the server.
func TestQuestionStateRefused(t *testing.T) {
	p := newPairWith(t, false, func(c *Config) { c.QuietHold = 2 * time.Second })
	p.bridgeServer(t, "q2", askTwiceServer(t))
	if err := p.d.WaitLive(t.Context(), "mcp__q2__ask2"); err != nil {
		t.Fatal(err)
	}
	const s = "lb-qstate"
	callParams := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "mcp__q2__ask2", "arguments": map[string]any{}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	decode := func(what string, res json.RawMessage, rerr *rpcError) inputRequired {
		t.Helper()
		var ir inputRequired
		if rerr != nil || json.Unmarshal(res, &ir) != nil || ir.ResultType != "input_required" || ir.RequestState == "" ||
			ir.InputRequests["question"].Method != "elicitation/create" {
			t.Fatalf("%s: %s %+v", what, res, rerr)
		}
		return ir
	}
	res, rerr := p.rpc(t, "A", s, "alice", "tools/call", callParams(nil), true)
	ir1 := decode("tools/call", res, rerr)
	if msg := ir1.InputRequests["question"].Params.Message; msg != "The MCP server q2 asks: Your name, please." {
		t.Fatalf("first question %q", msg)
	}
	stillParked := func(what string) {
		t.Helper()
		var list struct {
			Parked []bus.ParkedCall `json:"parked"`
		}
		if err := p.bus.Admin(t.Context(), "parked.list", s, nil, &list); err != nil || len(list.Parked) != 1 || list.Parked[0].Name != "mcp__q2__elicit" {
			t.Fatalf("%s: the question is not parked alone: %+v %v", what, list, err)
		}
	}
	stillParked("asked")
	answer := func(content map[string]any) map[string]any {
		return map[string]any{"question": map[string]any{"action": "accept", "content": content}}
	}
	retry := func(backend, session, user, state string, in map[string]any) (json.RawMessage, *rpcError) {
		t.Helper()
		return p.rpc(t, backend, session, user, "tools/call", callParams(map[string]any{"requestState": state, "inputResponses": in}), true)
	}
	refused := func(what, backend, session, user, state string) {
		t.Helper()
		res, rerr := retry(backend, session, user, state, answer(map[string]any{"name": "Mallory"}))
		if rerr != nil {
			t.Fatalf("%s on %s: %+v", what, backend, rerr)
		}
		if text, isErr := resultText(t, res); !isErr || !strings.Contains(text, "names no call") {
			t.Fatalf("%s on %s: %s", what, backend, res)
		}
	}
	for _, c := range []struct{ name, session, user, state string }{
		{"another user", s, "bob", ir1.RequestState},
		{"another session", s + "-other", "alice", ir1.RequestState},
		{"forged", s, "alice", strings.Repeat("0", 32)},
		{"not an id", s, "alice", "../" + ir1.RequestState},
	} {
		for _, backend := range []string{"A", "B"} {
			refused(c.name, backend, c.session, c.user, c.state)
		}
	}
	stillParked("after the refused retries")
	// The real retry on B: the answer reaches the server, whose next
	// question is the next round.
	res, rerr = retry("B", s, "alice", ir1.RequestState, answer(map[string]any{"name": "Ada"}))
	ir2 := decode("the first retry", res, rerr)
	if msg := ir2.InputRequests["question"].Params.Message; msg != "The MCP server q2 asks: Your colour, please." {
		t.Fatalf("second question %q", msg)
	}
	for _, backend := range []string{"A", "B"} {
		refused("superseded", backend, s, "alice", ir1.RequestState)
	}
	stillParked("after the superseded retries")
	// A cancel publishes nothing: the question stays on the bus, and the
	// retry waits for the call until its request's hold (QuietHold).
	res, rerr = retry("B", s, "alice", ir2.RequestState, map[string]any{"question": map[string]any{"action": "cancel"}})
	if text, isErr := resultText(t, res); rerr != nil || !isErr || !strings.Contains(text, "still running") {
		t.Fatalf("the cancel on B: %s %+v", res, rerr)
	}
	stillParked("after a cancel")
	res, rerr = retry("A", s, "alice", ir2.RequestState, map[string]any{"question": map[string]any{"action": "decline"}})
	if text, isErr := resultText(t, res); rerr != nil || isErr || text != "decline at 2" {
		t.Fatalf("the decline on A: %s %+v", res, rerr)
	}
}

// TestQuestionOfAnotherUser: a question a bridged server asks for bob's
// call, parked in the same session, is never put to alice's 2026-07-28
// host calling the same tool: she is asked her own call's question once,
// and bob's stays parked for him.
func TestQuestionOfAnotherUser(t *testing.T) {
	e := newEnv(t)
	e.bridgeServer(t, "q", mcptest.AskServer(t))
	if err := e.d.WaitLive(t.Context(), "mcp__q__ask"); err != nil {
		t.Fatal(err)
	}
	const s = "s-users"
	ev, err := e.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	bobs := client.NewReplyID()
	go func() {
		_, _ = e.bus.Call(t.Context(), s, bus.Batch{User: client.Input("bob"), Calls: []bus.Call{{ID: "bob-1", Name: "mcp__q__ask", Input: json.RawMessage(`{}`)}}},
			client.WithReplyID(bobs))
	}()
	t.Cleanup(func() { _ = e.bus.Cancel(context.Background(), s, bobs) })
	_, bobQ := parkedEvent(t, ev, "mcp__q__elicit")
	h := &hostAnswers{asked: make(chan string, 4), result: mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"name": "Ada"}}}}
	c := e.connect(t, s, mcp.ProtocolVersion20260728, "alice", mcpclient.WithElicitationHandler(h))
	r, err := call(t, c, "mcp__q__ask", map[string]any{}, false)
	if err != nil || r.IsError || textOf(r) != `accept {"name":"Ada"}` {
		t.Fatalf("alice's call: %+v %v", r, err)
	}
	if n := len(h.asked); n != 1 {
		t.Fatalf("alice's host was asked %d times, want once", n)
	}
	var list struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := e.bus.Admin(t.Context(), "parked.list", s, nil, &list); err != nil || len(list.Parked) != 1 || list.Parked[0].ID != bobQ.ID {
		t.Fatalf("bob's question is not parked alone: %+v %v", list, err)
	}
}

// FuzzQuestionOf: any parked input is a question of the call or not,
// never a panic; one taken is of the tool's server, for the user, and
// names the call.
func FuzzQuestionOf(f *testing.F) {
	f.Add("mcp__q__elicit", `{"server":"q","user":"alice","mode":"form","message":"?","calls":["c1"]}`, "mcp__q__ask", "c1")
	f.Add("mcp__q__elicit", `{"server":"q","user":"alice","calls":"c1"}`, "mcp__q__ask", "c1")
	f.Add("mcp__a__b__elicit", `{"server":"a__b","user":"alice","calls":["x","c1"]}`, "mcp__a__b__x", "c1")
	f.Add("mcp____elicit", `{"server":"","calls":[""]}`, "mcp____", "")
	f.Fuzz(func(t *testing.T, name, input, tool, callID string) {
		q, ok := questionOf(bus.Parked{ID: "p", Name: name, Kind: bus.KindExternal, Asked: true, Input: json.RawMessage(input)}, tool, callID, "alice")
		if !ok {
			return
		}
		var user string
		_ = json.Unmarshal(q.User, &user)
		if name != "mcp__"+q.Server+"__elicit" || !strings.HasPrefix(tool, "mcp__"+q.Server+"__") || user != "alice" || !slices.Contains(q.Calls, callID) {
			t.Fatalf("took %q for %q (tool %q, call %q)", input, name, tool, callID)
		}
	})
}

// TestNewRound: a round's record and input request, per kind.
func TestNewRound(t *testing.T) {
	c := &confirmer{}
	start := time.Now()
	base := stateRecord{Session: "s1", User: "alice", Tool: "mcp__q__ask", CallID: "c1", ReplyID: "r1", Started: start, Deadline: start.Add(time.Minute)}
	qin, _ := json.Marshal(map[string]any{"server": "q", "user": "alice", "mode": "form", "message": "Name?", "calls": []string{"c1"}})
	qp := bus.Parked{ID: "p1", Name: "mcp__q__elicit", Kind: bus.KindExternal, Asked: true, Input: qin}
	qn, _ := questionOf(qp, "mcp__q__ask", "c1", "alice")
	state, r, res := c.newRound(t.Context(), base, ask{Park: qp, ReplyID: "r2", Question: &qn})
	if !idPattern.MatchString(state) || r.Kind != inputQuestion || r.AskReplyID != "r2" || r.Park.ID != "p1" || r.ReplyID != "r1" ||
		!r.Expires.Equal(base.Deadline.Add(resultKept)) || res.RequestState != state || res.ResultType != mcp.ResultTypeInputRequired {
		t.Fatalf("question round: %s %+v %+v", state, r, res)
	}
	if in, ok := res.InputRequests[inputQuestion]; !ok || len(res.InputRequests) != 1 || in.Method != mcp.MethodElicitationCreate {
		t.Fatalf("question round's input requests: %+v", res.InputRequests)
	}
	cp := bus.Parked{ID: "p2", Name: "deploy", Kind: bus.KindConfirm, Input: json.RawMessage(`{}`)}
	dl := start.Add(30 * time.Second)
	state2, r, res := c.newRound(t.Context(), base, ask{Park: cp, ReplyID: "r1", deadline: dl})
	if state2 == state || r.Kind != "" || r.Park.ID != "p2" || !r.Deadline.Equal(dl) || res.InputRequests[inputConfirm].Method != mcp.MethodElicitationCreate {
		t.Fatalf("confirm round: %+v %+v", r, res)
	}
}

// TestRoundsOfBothKinds: a pending call's bridged server's questions and
// its confirm park both become rounds, in the order they come, each stored;
// a closed question stream is no end (the confirm still comes); a round
// that comes once the call has ended is never asked: the call's result is.
func TestRoundsOfBothKinds(t *testing.T) {
	e := newEnv(t)
	c := &confirmer{session: "s1", user: "alice", states: e.f.kv, closing: t.Context(), pending: map[string]*round{},
		holds: func(context.Context, mcp.CallToolRequest) (time.Duration, time.Duration) {
			return time.Minute, time.Minute
		}}
	confirm, questions := make(chan ask, 1), make(chan ask, 1)
	p := &pending{done: make(chan struct{}), confirm: confirm, questions: questions, cancel: func() {},
		base: stateRecord{Session: "s1", User: "alice", Tool: "mcp__q__ask", CallID: "c1", ReplyID: "r1", Started: time.Now()}}
	round := func(want, park string) {
		t.Helper()
		res, asked, err := c.waitRound(t.Context(), p, mcp.CallToolRequest{}, nil, nil)
		if _, ok := res.InputRequests[want]; err != nil || !asked || len(res.InputRequests) != 1 || !ok {
			t.Fatalf("want a %s round: %+v %v %v", want, res, asked, err)
		}
		if _, err := c.states.getState(t.Context(), "s1", "alice", p.state); err != nil {
			t.Fatalf("the %s round's state is not stored: %v", want, err)
		}
		if got := c.pending[p.state].a.Park.ID; got != park {
			t.Fatalf("the %s round asks about park %q, want %q", want, got, park)
		}
	}
	questions <- ask{Park: bus.Parked{ID: "p1", Name: "mcp__q__elicit"}, ReplyID: "q1", Question: &bus.Question{Server: "q", Message: "Name?"}}
	round(inputQuestion, "p1")
	close(questions)
	confirm <- ask{Park: bus.Parked{ID: "p2", Name: "deploy", Input: json.RawMessage(`{}`)}, ReplyID: "r1", deadline: time.Now().Add(time.Minute)}
	round(inputConfirm, "p2")

	p.res = mcp.NewToolResultText("done")
	close(p.done)
	for range 20 { // a confirm waiting each time: the select may pick either
		select {
		case confirm <- ask{Park: bus.Parked{ID: "p3", Name: "deploy", Input: json.RawMessage(`{}`)}, ReplyID: "r1"}:
		default:
		}
		if res, asked, err := c.waitRound(t.Context(), p, mcp.CallToolRequest{}, nil, nil); err != nil || asked || textOf(res) != "done" {
			t.Fatalf("a round after the call ended: %+v %v %v", res, asked, err)
		}
	}
}

// TestWaitRound: a request of a pending call ends with the call's result,
// with late's result when its hold passes (the call goes on), or with its
// context, cancelling the call; a round the host cannot be asked (a URL
// question of a host without URL elicitation) is left to the bus.
func TestWaitRound(t *testing.T) {
	c := &confirmer{}
	newPending := func() (*pending, chan ask, *bool) {
		questions := make(chan ask, 1)
		cancelled := false
		p := &pending{done: make(chan struct{}), questions: questions}
		p.cancel = func() { cancelled = true; close(p.done) }
		return p, questions, &cancelled
	}
	late := func() *mcp.CallToolResult { return mcp.NewToolResultError("late") }

	p, _, _ := newPending()
	p.res = mcp.NewToolResultText("done")
	close(p.done)
	if res, asked, err := c.waitRound(t.Context(), p, mcp.CallToolRequest{}, nil, late); err != nil || asked || textOf(res) != "done" {
		t.Fatalf("ended: %+v %v %v", res, asked, err)
	}

	p, questions, cancelled := newPending()
	questions <- ask{Question: &bus.Question{Mode: mcp.ElicitationModeURL, URL: "https://example.com/form"}} // this host has no URL elicitation
	fire := make(chan time.Time, 1)
	fire <- time.Now()
	if res, asked, err := c.waitRound(t.Context(), p, mcp.CallToolRequest{}, fire, late); err != nil || asked || textOf(res) != "late" {
		t.Fatalf("held past its hold: %+v %v %v", res, asked, err)
	}
	if *cancelled {
		t.Fatal("a request held past its hold cancelled the call")
	}

	p, _, cancelled = newPending()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if res, _, err := c.waitRound(ctx, p, mcp.CallToolRequest{}, nil, late); res != nil || err == nil || !*cancelled {
		t.Fatalf("given up: %+v %v, cancelled %v", res, err, *cancelled)
	}
}

// TestTaskQuestionStatus: a task-augmented call (2025-11-25 shapes) of a
// bridged tool whose server asks becomes input_required, with the
// question under inputRequests and a status message naming where else it
// is answered, read on the other process; the host answers it itself
// with tasks/update (issue 29: task hosts are asked bridged questions
// themselves), and the task completes with the server's result.
func TestTaskQuestionStatus(t *testing.T) {
	p := newPair(t, false)
	p.bridgeServer(t, "q", mcptest.AskServer(t))
	if err := p.d.WaitLive(t.Context(), "mcp__q__ask"); err != nil {
		t.Fatal(err)
	}
	const s = "lb-task-q"
	ev, err := p.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	if got := names(t, p.env.connect(t, s, mcp.ProtocolVersion20251125, "alice")); !slices.Contains(got, "mcp__q__ask") {
		t.Fatalf("listed: %v", got)
	}
	id := p.startTask(t, "A", s, "mcp__q__ask")
	_, q := parkedEvent(t, ev, "mcp__q__elicit")
	d := p.pollTask(t, "B", s, id, mcp.TaskStatusInputRequired)
	key := "question-" + q.ID
	raw, ok := d.InputRequests[key]
	if !ok || !strings.Contains(string(raw), "The MCP server q asks: Your name, please.") {
		t.Fatalf("inputRequests: %+v", d.InputRequests)
	}
	tk := p.task(t, "A", s, "tasks/get", id)
	if !strings.Contains(tk.StatusMessage, q.ID) || !strings.Contains(tk.StatusMessage, "toolbus answer") {
		t.Fatalf("status message: %+v", tk)
	}
	if _, rerr := p.rpc(t, "B", s, "alice", "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}}}, true); rerr != nil {
		t.Fatalf("tasks/update: %+v", rerr)
	}
	res, rerr := p.rpc(t, "B", s, "alice", "tasks/result", map[string]any{"taskId": id}, false)
	if text, isErr := resultText(t, res); rerr != nil || isErr || text != `accept {"name":"Ada"}` {
		t.Fatalf("tasks/result: %s %+v", res, rerr)
	}
}
