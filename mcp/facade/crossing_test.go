package facade

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestLegacyAlternating (issue 29, F2): mcp-go's 2025-11-25 client behind
// the alternating address (every request, its GET stream and its answers
// to the facade's elicitations go to the next process) confirms four
// deploys through elicitation; answers that reach the process that did
// not ask are carried to the one that did, and every call succeeds.
func TestLegacyAlternating(t *testing.T) {
	p := newPair(t, false)
	s := "lb-legacy"
	if err := p.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	p.resetTools(t, s, map[string]bool{"ops": true})
	env := *p.env
	env.url = p.url
	el := &elicitor{decision: choiceAllow, asked: make(chan string, 8)}
	c := env.connect(t, s, mcp.ProtocolVersion20251125, "alice", mcpclient.WithElicitationHandler(el))
	for i := range 4 {
		r, err := call(t, c, "deploy", map[string]any{}, false)
		if err != nil || r.IsError || textOf(r) != "deployed" {
			t.Fatalf("deploy %d behind the alternating address: %+v %v (served %v)", i, r, err, p.servedAll())
		}
		testkit.Recv(t, el.asked, bound, "the elicitation")
	}
	calls, answers := p.servedBy("tools/call"), p.servedBy("")
	crossed := 0
	for i := range min(len(calls), len(answers)) {
		if calls[i] != answers[i] {
			crossed++
		}
	}
	if len(answers) != 4 || crossed == 0 {
		t.Fatalf("tools/call served by %v, the answers by %v: want some answers on the other process", calls, answers)
	}
}

// TestLegacyCancelOtherProcess (issue 29, F2; raw JSON-RPC at
// 2025-11-25): a tools/call runs on process A; its
// notifications/cancelled posted to process B interrupts it. Another
// user's cancel naming the same MCP session and request id (posted to B)
// does not: the call runs to its end.
func TestLegacyCancelOtherProcess(t *testing.T) {
	p := newPair(t, false)
	s := "lb-cancel"
	sid := p.initialize(t, "A", s, "alice")

	// Cancelled through the other process.
	stream := p.startCall(t, "A", s, "alice", sid, 7)
	p.post(t, "B", s, "alice", sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}`)
	if rest := testkit.Recv(t, stream, bound, "the cancelled call's stream to end"); strings.Contains(rest, "slow done") {
		t.Fatalf("the call ran to its end: %s", rest)
	}

	// Another user's cancel of alice's call: carried under bob's key,
	// which alice's process does not follow.
	stream = p.startCall(t, "A", s, "alice", sid, 8)
	p.post(t, "B", s, "bob", sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8,"reason":"mallory"}}`)
	p.post(t, "A", s, "bob", sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8,"reason":"mallory"}}`)
	close(p.release)
	if rest := testkit.Recv(t, stream, bound, "the call's stream"); !strings.Contains(rest, "slow done") {
		t.Fatalf("another user's cancel interrupted alice's call: %s", rest)
	}
}

// servedAll returns every request the front passed on, in order.
func (p *pair) servedAll() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.served...)
}

// post sends body to backend as user in MCP session sid and wants 202.
func (p *pair) post(t *testing.T, backend, s, user, sid, body string) {
	t.Helper()
	resp := p.do(t, backend, s, user, sid, body)
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%s on %s: HTTP %d %s", body, backend, resp.StatusCode, raw)
	}
}

func (p *pair) do(t *testing.T, backend, s, user, sid, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.url+"/mcp/"+s, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Toolbus-User", user)
	req.Header.Set("X-Test-Backend", backend)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20251125)
	if sid != "" {
		req.Header.Set(server.HeaderKeySessionID, sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// initialize starts an MCP session at 2025-11-25 on backend and returns
// its id.
func (p *pair) initialize(t *testing.T, backend, s, user string) string {
	t.Helper()
	resp := p.do(t, backend, s, user, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,`+
		`"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, mcp.ProtocolVersion20251125))
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	sid := resp.Header.Get(server.HeaderKeySessionID)
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: HTTP %d, session %q", resp.StatusCode, sid)
	}
	p.post(t, backend, s, user, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

// startCall posts a tools/call of slow (with a progress token) to
// backend, returns once its progress notice arrived (the call runs), and
// sends the rest of its stream when the stream ends.
func (p *pair) startCall(t *testing.T, backend, s, user, sid string, id int) <-chan string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "slow", "arguments": map[string]any{}, "_meta": map[string]any{"progressToken": "p"}}})
	resp := p.do(t, backend, s, user, sid, string(body))
	running, rest := make(chan struct{}), make(chan string, 1)
	go func() {
		defer func() { _ = resp.Body.Close() }()
		var b bytes.Buffer
		sc := bufio.NewScanner(resp.Body)
		signalled := false
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if !signalled && strings.Contains(sc.Text(), "notifications/progress") {
				signalled = true
				close(running)
			}
		}
		if !signalled {
			close(running)
		}
		rest <- b.String()
	}()
	testkit.Recv(t, running, bound, "the call's progress")
	return rest
}

// TestPostedResponse: which POST bodies are answers the facade may carry
// to another process (mcp-go answers empty ones itself).
func TestPostedResponse(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"decision":"allow"}}}`, true},
		{`{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"no"}}`, true},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, false},
		{`{"jsonrpc":"2.0","id":1}`, false},
		{`{"jsonrpc":"2.0","id":null,"result":{"x":1}}`, false},
		{`{"jsonrpc":"2.0","result":{"x":1}}`, false},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{"x":1}}`, false},
	} {
		var p posted
		if err := json.Unmarshal([]byte(c.body), &p); err != nil {
			t.Fatal(err)
		}
		if got := p.response(); got != c.want {
			t.Errorf("%s: response() = %v, want %v", c.body, got, c.want)
		}
	}
}

// TestAdoptHeaderRefused: a client cannot choose its MCP session id (say,
// another host's) with the facade's internal adoption header: the
// facade removes it, and initialize gets a new id.
func TestAdoptHeaderRefused(t *testing.T) {
	p := newPair(t, false)
	const chosen = "mcp-session-00000000-0000-4000-8000-000000000000"
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.url+"/mcp/adopt-refused", strings.NewReader(fmt.Sprintf(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		mcp.ProtocolVersion20251125)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Toolbus-User", "mallory")
	req.Header.Set(adoptHeader, chosen)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if sid := resp.Header.Get(server.HeaderKeySessionID); resp.StatusCode != http.StatusOK || sid == "" || sid == chosen {
		t.Fatalf("initialize with the adoption header: HTTP %d, session %q", resp.StatusCode, sid)
	}
}
