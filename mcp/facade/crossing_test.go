package facade

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/mcp/mcptest"
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
// user's cancel naming the same MCP session and request id, and the same
// user's from another MCP session of the bus session or of another bus
// session (each posted to both processes), do not: the call runs to its
// end.
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
	// which alice's process does not follow; and alice's own hosts of
	// another MCP session in this bus session and of another bus session,
	// naming the same request id: carried under their own keys.
	stream = p.startCall(t, "A", s, "alice", sid, 8)
	cancel8 := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8,"reason":"mallory"}}`
	p.post(t, "B", s, "bob", sid, cancel8)
	p.post(t, "A", s, "bob", sid, cancel8)
	other := p.initialize(t, "B", s, "alice")
	elsewhere := p.initialize(t, "A", s+"-2", "alice")
	for _, backend := range []string{"A", "B"} {
		p.post(t, backend, s, "alice", other, cancel8)
		p.post(t, backend, s+"-2", "alice", elsewhere, cancel8)
	}
	close(p.release)
	if rest := testkit.Recv(t, stream, bound, "the call's stream"); !strings.Contains(rest, "slow done") {
		t.Fatalf("another user's cancel interrupted alice's call: %s", rest)
	}
}

// TestLegacyQuestionsAtOnce (issue 29, F2; raw JSON-RPC at 2025-11-25):
// one MCP session calls a bridged tool on process A and, while its
// server's question is open, again on B; each process asks the host
// (elicitation/create on the call's stream), and the host answers each
// question on the other process. mcp-go numbers the requests it sends
// from 1 in each process, so both questions had id 1 and each answer was
// taken by the other process's own question: the calls got each other's
// names. Each process now tags its ids, and each answer reaches the
// question it answers. Then hosts of another MCP session (same user and
// bus session), of another bus session and of another user post an
// answer with the id of an open question to both processes: none is
// taken, and the host's own answer is.
func TestLegacyQuestionsAtOnce(t *testing.T) {
	p := newPair(t, false)
	p.bridgeServer(t, "q", mcptest.AskServer(t))
	if err := p.d.WaitLive(t.Context(), "mcp__q__ask"); err != nil {
		t.Fatal(err)
	}
	s := "lb-questions"
	sid := p.initializeWith(t, "A", s, "alice", `{"elicitation":{}}`)
	other := map[string]string{"A": "B", "B": "A"}
	ask := func(backend string, id int, who string) (<-chan streamMsg, streamMsg) {
		msgs := p.stream(t, backend, s, "alice", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call",`+
			`"params":{"name":"mcp__q__ask","arguments":{"for":%q}}}`, id, who))
		for m := range msgs {
			if m.Method == "elicitation/create" && strings.Contains(string(m.Params), "(for "+who+")") {
				return msgs, m
			}
		}
		t.Fatalf("%s: the call on %s ended without its question", who, backend)
		return nil, streamMsg{}
	}
	answer := func(backend, user, mcpSession, session string, id json.RawMessage, name string) int {
		resp := p.do(t, backend, session, user, mcpSession, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"name":%q}}}`, id, name))
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	streamX, qx := ask("A", 11, "x")
	streamY, qy := ask("B", 12, "y")
	t.Logf("the questions' ids: %s on A, %s on B", qx.ID, qy.ID)
	if string(qx.ID) == string(qy.ID) {
		t.Fatalf("both processes asked with id %s", qx.ID)
	}

	// Hosts that are not this MCP session's: nothing they post is taken.
	sid2 := p.initializeWith(t, "B", s, "alice", `{"elicitation":{}}`)
	sid3 := p.initializeWith(t, "A", "lb-questions-2", "alice", `{"elicitation":{}}`)
	sid4 := p.initializeWith(t, "B", s, "mallory", `{"elicitation":{}}`)
	for _, intruder := range []struct{ user, mcpSession, session string }{
		{"alice", sid2, s}, {"alice", sid3, "lb-questions-2"}, {"mallory", sid4, s}, {"mallory", sid, s},
	} {
		for _, backend := range []string{"A", "B"} {
			for _, q := range []streamMsg{qx, qy} {
				if code := answer(backend, intruder.user, intruder.mcpSession, intruder.session, q.ID, "mallory"); code >= 500 {
					t.Fatalf("an intruder's answer on %s: HTTP %d", backend, code)
				}
			}
		}
	}

	// The host answers each question on the process that did not ask it,
	// and any further question (a process's relay asks every question of
	// the server it sees) wherever it was asked.
	results := map[string]string{}
	pending := map[string]<-chan streamMsg{"x": streamX, "y": streamY}
	backendOf := map[string]string{"x": "A", "y": "B"}
	for _, q := range []struct {
		who string
		m   streamMsg
	}{{"x", qx}, {"y", qy}} {
		if code := answer(other[backendOf[q.who]], "alice", sid, s, q.m.ID, q.who+"-name"); code != http.StatusAccepted {
			t.Fatalf("the answer for %s on %s: HTTP %d", q.who, other[backendOf[q.who]], code)
		}
	}
	for who, msgs := range pending {
		for m := range msgs {
			switch {
			case m.Method == "elicitation/create":
				var params struct{ Message string }
				_ = json.Unmarshal(m.Params, &params)
				name := "x-name"
				if strings.Contains(params.Message, "(for y)") {
					name = "y-name"
				}
				// The call may end first: its question then has no one to take it.
				if code := answer(other[backendOf[who]], "alice", sid, s, m.ID, name); code != http.StatusAccepted && code != http.StatusBadRequest {
					t.Fatalf("a further answer: HTTP %d", code)
				}
			case m.Result != nil:
				var r mcp.CallToolResult
				if err := json.Unmarshal(m.Result, &r); err != nil {
					t.Fatal(err)
				}
				results[who] = textOf(&r)
			}
		}
	}
	if results["x"] != `accept {"name":"x-name"}` || results["y"] != `accept {"name":"y-name"}` {
		t.Fatalf("the calls' results: %q (served %v)", results, p.servedAll())
	}
}

// streamMsg is a JSON-RPC message a facade sent on an event stream.
type streamMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
}

// stream posts body to backend as user in MCP session sid and sends each
// message of its response (an event stream or one JSON object) until it
// ends.
func (p *pair) stream(t *testing.T, backend, s, user, sid, body string) <-chan streamMsg {
	t.Helper()
	resp := p.do(t, backend, s, user, sid, body)
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		t.Fatalf("%s on %s: HTTP %d %s", body, backend, resp.StatusCode, raw)
	}
	return p.streamOf(t, resp)
}

// streamOf sends each message of resp (an event stream or one JSON
// object) until it ends.
func (p *pair) streamOf(t *testing.T, resp *http.Response) <-chan streamMsg {
	out := make(chan streamMsg, 16)
	go func() {
		defer close(out)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok && !strings.HasPrefix(sc.Text(), "{") {
				continue
			}
			if !ok {
				line = sc.Text()
			}
			var m streamMsg
			if json.Unmarshal([]byte(line), &m) == nil {
				out <- m
			}
		}
	}()
	return out
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
	resp, err := http.DefaultClient.Do(p.request(t, backend, s, user, sid, body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// request is the POST of body to backend as user in MCP session sid.
func (p *pair) request(t *testing.T, backend, s, user, sid, body string) *http.Request {
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.url+"/mcp/"+s, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Toolbus-User", user)
	req.Header.Set("X-Test-Backend", backend)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20251125)
	if sid != "" {
		req.Header.Set(server.HeaderKeySessionID, sid)
	}
	return req
}

// initialize starts an MCP session at 2025-11-25 on backend and returns
// its id.
func (p *pair) initialize(t *testing.T, backend, s, user string) string {
	t.Helper()
	return p.initializeWith(t, backend, s, user, `{}`)
}

// initializeWith is initialize with the client capabilities caps.
func (p *pair) initializeWith(t *testing.T, backend, s, user, caps string) string {
	t.Helper()
	resp := p.do(t, backend, s, user, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,`+
		`"capabilities":%s,"clientInfo":{"name":"raw","version":"1"}}}`, mcp.ProtocolVersion20251125, caps))
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
		var p rpcMessage
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
// facade removes it, and initialize gets a new id, its client recorded
// for the other processes as any other's (only adopt's own initialize is
// not recorded).
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
	var rec clientRecord
	key := userKey("m", "adopt-refused", "mallory", string(ConfirmHostUser), digest(resp.Header.Get(server.HeaderKeySessionID)))
	if err := p.backend[0].kv.get(t.Context(), key, &rec); err != nil || rec.Info.Name != "raw" {
		t.Fatalf("the client's record: %+v %v", rec, err)
	}
}

// TestTagID: which ids are a process's tagged ids, and how a server
// request's event is tagged (issue 29, F2).
func TestTagID(t *testing.T) {
	for _, c := range []struct {
		id, tag, n string
		ok         bool
	}{
		{`"T1.7"`, "T1", "7", true},
		{`"T1.9223372036854775807"`, "T1", "9223372036854775807", true},
		{`"T1.0"`, "", "", false},
		{`"T1.07"`, "", "", false},
		{`"T1.-7"`, "", "", false},
		{`"T1.7.1"`, "", "", false},
		{`".7"`, "", "", false},
		{`"T1"`, "", "", false},
		{`"T1.9223372036854775808"`, "", "", false},
		{`7`, "", "", false},
		{`null`, "", "", false},
		{``, "", "", false},
		{`"T1.7`, "", "", false},
	} {
		tag, n, ok := untagID(json.RawMessage(c.id))
		if tag != c.tag || string(n) != c.n || ok != c.ok {
			t.Errorf("untagID(%s) = %q %q %v, want %q %q %v", c.id, tag, n, ok, c.tag, c.n, c.ok)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"elicitation/create\",\"params\":{\"message\":\"<hi>\"}}\n\n",
			"event: message\ndata: {\"id\":\"T1.3\",\"jsonrpc\":\"2.0\",\"method\":\"elicitation/create\",\"params\":{\"message\":\"\\u003chi\\u003e\"}}\n\n"},
		{"id: 5\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n\n",
			"id: 5\nevent: message\ndata: {\"id\":\"T1.4\",\"jsonrpc\":\"2.0\",\"method\":\"ping\"}\n\n"},
		// A notification, a response, a string id, no data: as they are.
		{"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n", ""},
		{"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"method\":\"x\"}}\n\n", ""},
		{"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"}\n\n", ""},
		{"event: message\n\n", ""},
		{"data: {\"method\":\n\n", ""},
	} {
		want := c.want
		if want == "" {
			want = c.in
		}
		if got := string(tagEvent([]byte(c.in), "T1")); got != want {
			t.Errorf("tagEvent(%q) = %q, want %q", c.in, got, want)
		}
	}

	// The writer: events split across writes and several in one write;
	// a body that is not an event stream passes as it is.
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "text/event-stream")
	w := &tagWriter{ResponseWriter: rec, tag: "T1"}
	req := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n"
	note := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n"
	for _, part := range []string{req[:20], req[20:] + note[:5], note[5:] + req} {
		if n, err := w.Write([]byte(part)); n != len(part) || err != nil {
			t.Fatalf("Write: %d %v", n, err)
		}
	}
	tagged := "event: message\ndata: {\"id\":\"T1.1\",\"jsonrpc\":\"2.0\",\"method\":\"ping\"}\n\n"
	if got := rec.Body.String(); got != tagged+note+tagged {
		t.Fatalf("the stream: %q", got)
	}
	rec = httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/json")
	w = &tagWriter{ResponseWriter: rec, tag: "T1"}
	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n\n"
	_, _ = w.Write([]byte(body))
	if rec.Body.String() != body {
		t.Fatalf("a JSON body: %q", rec.Body.String())
	}
}

// FuzzTagEvent: tagEvent never panics, and an event it changes carries a
// request whose id is tagged T1.
func FuzzTagEvent(f *testing.F) {
	f.Add([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n\n"))
	f.Add([]byte("data: {\"id\":1e3,\"method\":\"x\"}\n"))
	f.Add([]byte("data: \n"))
	f.Add([]byte("data: {\"id\":0,\"method\":\"0\"}\n"))
	f.Fuzz(func(t *testing.T, ev []byte) {
		out := tagEvent(ev, "T1")
		if bytes.Equal(out, ev) {
			return
		}
		_, data, _ := bytes.Cut(out, []byte("data: "))
		data, _, _ = bytes.Cut(data, []byte("\n"))
		var m struct {
			ID     json.RawMessage
			Method string
		}
		if err := json.Unmarshal(data, &m); err != nil || m.Method == "" {
			t.Fatalf("tagEvent(%q) = %q: %v", ev, out, err)
		}
		if tag, _, ok := untagID(m.ID); !ok || tag != "T1" {
			t.Fatalf("tagEvent(%q) = %q", ev, out)
		}
	})
}

// TestLegacyCarriedRefusedRetried (raw JSON-RPC at 2025-11-25): the
// stream refuses the put that carries a host's answer to the process that
// asked (here: larger than the stream then takes), so the host gets 503,
// though the put reached that process's subscription all the same, and
// was taken; the host retries at once, and again while the MCP session's
// next question is open: each retry is carried and delivered. The answer
// counts once: the call ends deployed, and a retry, an answer to a
// question no longer asked, is dropped (mcp-go has no request of its id
// pending), never taken for the next question (id <tag>.2), which gets
// its own answer. A refused cancel interrupts its call likewise (the host
// sees 202 either way), and the cancel posted again while a later call
// runs harms it not. No carried message is left stored.
func TestLegacyCarriedRefusedRetried(t *testing.T) {
	p := newPair(t, false)
	const s = "lb-refused"
	if err := p.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	p.resetTools(t, s, map[string]bool{"ops": true})
	sid := p.initializeWith(t, "A", s, "alice", `{"elicitation":{}}`)
	kv, err := p.backend[0].kv.bucket(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Every message carried for this MCP session, as A's follower gets them.
	subject, err := p.backend[0].kv.subject(t.Context(), userKey("x", s, "alice", string(ConfirmHostUser), digest(sid))+".*")
	if err != nil {
		t.Fatal(err)
	}
	carried, err := p.conn(t, "facade").SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	delivered := func(what string) {
		t.Helper()
		for {
			m, err := carried.NextMsg(bound)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if !kvDeleted(m) {
				return
			}
		}
	}
	js, err := jetstream.New(p.conn(t, xtest.RoleRouter))
	if err != nil {
		t.Fatal(err)
	}
	// refuse has the stream refuse the messages above 4 KiB (on) or take
	// them again (off).
	refuse := func(on bool) {
		t.Helper()
		stream, err := js.Stream(t.Context(), "KV_"+kv.Bucket())
		if err != nil {
			t.Fatal(err)
		}
		cfg := stream.CachedInfo().Config
		cfg.MaxMsgSize = 1 << 20
		if on {
			cfg.MaxMsgSize = 4 << 10
		}
		if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(body string) int {
		t.Helper()
		refuse(true)
		defer refuse(false)
		resp := p.do(t, "B", s, "alice", sid, body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	pad := strings.Repeat("p", 8<<10) // makes a carried message larger than 4 KiB
	answer := func(id json.RawMessage, decision string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"decision":%q},"_meta":{"pad":%q}}}`, id, decision, pad)
	}
	deploy := func(id int) (<-chan streamMsg, streamMsg) {
		t.Helper()
		msgs := p.stream(t, "A", s, "alice", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"deploy","arguments":{}}}`, id))
		for m := range msgs {
			if m.Method == "elicitation/create" {
				return msgs, m
			}
		}
		t.Fatalf("call %d ended without its confirmation", id)
		return nil, streamMsg{}
	}
	ending := func(msgs <-chan streamMsg) (text string, isError bool, asked int) {
		t.Helper()
		for m := range msgs {
			switch {
			case m.Method == "elicitation/create":
				asked++
			case m.Result != nil:
				text, isError = resultText(t, m.Result)
			}
		}
		return text, isError, asked
	}

	msgs, q := deploy(21)
	if code := refused(answer(q.ID, choiceAllow)); code != http.StatusServiceUnavailable {
		t.Fatalf("the refused carry: HTTP %d, want 503", code)
	}
	delivered("the refused answer")
	p.post(t, "B", s, "alice", sid, answer(q.ID, choiceAllow)) // the host's retry
	delivered("the retried answer")
	if text, isErr, asked := ending(msgs); text != "deployed" || isErr || asked != 0 {
		t.Fatalf("the call answered twice: %q isError %v, asked again %d times", text, isErr, asked)
	}
	// The next question is open (A follows again): the answer to the
	// first, posted once more, is not its answer.
	msgs, q2 := deploy(22)
	if string(q2.ID) == string(q.ID) {
		t.Fatalf("the next question has the id %s again", q.ID)
	}
	p.post(t, "B", s, "alice", sid, answer(q.ID, choiceAllow))
	delivered("the first answer again")
	p.post(t, "B", s, "alice", sid, answer(q2.ID, choiceDeny))
	delivered("the denial")
	if text, isErr, asked := ending(msgs); text == "deployed" || !isErr || asked != 0 {
		t.Fatalf("the denied call: %q isError %v, asked again %d times", text, isErr, asked)
	}

	// A cancel the stream refuses: delivered, and it interrupts its call.
	cancel := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":23,"reason":%q}}`, pad)
	stream := p.startCall(t, "A", s, "alice", sid, 23)
	if code := refused(cancel); code != http.StatusAccepted {
		t.Fatalf("the refused cancel: HTTP %d, want 202 (a notification's answer)", code)
	}
	delivered("the refused cancel")
	if rest := testkit.Recv(t, stream, bound, "the cancelled call's stream to end"); strings.Contains(rest, "slow done") {
		t.Fatalf("the refused cancel did not interrupt the call: %s", rest)
	}
	// Posted again while a later call runs, it harms it not.
	stream = p.startCall(t, "A", s, "alice", sid, 24)
	p.post(t, "B", s, "alice", sid, cancel)
	delivered("the cancel again")
	close(p.release)
	if rest := testkit.Recv(t, stream, bound, "the later call's stream"); !strings.Contains(rest, "slow done") {
		t.Fatalf("the cancel again interrupted a later call: %s", rest)
	}
	if left, err := kv.Latest(t.Context(), userKey("x", s, "alice", "")+">"); err != nil || len(left) > 0 {
		t.Fatalf("carried messages left stored: %d %v", len(left), err)
	}
}

// TestCallsAtOnceProgress (raw JSON-RPC at 2025-11-25): three tools/calls
// of slow (progress, then held until released) at once in one MCP session,
// each with its own progress token. Each call's progress goes out on its own
// request's stream, before its result, and on no other call's stream:
// mcp-go's one notification channel per session is not used for it (docs/mcp.md
// "Progress of calls at once").
func TestCallsAtOnceProgress(t *testing.T) {
	p := newPair(t, false)
	const s = "lb-progress"
	sid := p.initialize(t, "A", s, "alice")
	ev, err := p.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	first := p.startCall(t, "A", s, "alice", sid, 31) // token "p", alone: its progress came
	streams := map[string]chan string{}
	for _, token := range []string{"p32", "p33"} {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": token, "method": "tools/call",
			"params": map[string]any{"name": "slow", "arguments": map[string]any{}, "_meta": map[string]any{"progressToken": token}}})
		req := p.request(t, "A", s, "alice", sid, string(body))
		streams[token] = make(chan string, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				streams[token] <- err.Error()
				return
			}
			defer func() { _ = resp.Body.Close() }()
			raw, _ := io.ReadAll(resp.Body)
			streams[token] <- string(raw)
		}()
	}
	// All three reported progress on the bus (the facade saw it or sees
	// it soon; the results come after).
	for n := 0; n < 3; {
		if e := testkit.Recv(t, ev.C, bound, "the calls' progress events"); e.Type == bus.TypeCallProgress {
			n++
		}
	}
	close(p.release)
	got := map[string]string{"p": testkit.Recv(t, first, bound, "the first call's stream")}
	for token, c := range streams {
		got[token] = testkit.Recv(t, c, bound, "a later call's stream")
	}
	ids := map[string]string{"p": `"id":31`, "p32": `"id":"p32"`, "p33": `"id":"p33"`}
	for token, rest := range got {
		own := strings.Index(rest, fmt.Sprintf(`"progressToken":%q`, token))
		end := strings.Index(rest, ids[token])
		if !strings.Contains(rest, "slow done") || end < 0 {
			t.Errorf("call %s: not its result: %s", token, rest)
		}
		if own < 0 || own > end {
			t.Errorf("call %s: its progress is not on its stream before its result: %s", token, rest)
		}
		for other := range got {
			if other != token && strings.Contains(rest, fmt.Sprintf(`"progressToken":%q`, other)) {
				t.Errorf("call %s's stream carries call %s's progress: %s", token, other, rest)
			}
		}
	}
}
