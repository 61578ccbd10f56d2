package facade

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// pair is one deployment with two routers and two facade processes, each
// on its own NATS connection (on a cluster, on different nodes), behind
// one address that alternates requests between them, as a load balancer
// without affinity would. A request with X-Test-Backend: A or B goes
// there instead, for the tests that need to say which process answers.
type pair struct {
	*env
	url string

	mu      sync.Mutex
	backend [2]*Facade
	served  []string // "A tools/call", in order
	next    atomic.Int64
}

func newPair(t *testing.T, cluster bool) *pair { return newPairWith(t, cluster, nil) }

// newPairWith is newPair with both facades' Config changed by mod first.
func newPairWith(t *testing.T, cluster bool, mod func(*Config)) *pair {
	t.Helper()
	e := startEnvRouters(t, cluster, 2, mod)
	p := &pair{env: e}
	p.backend[0] = e.f
	p.backend[1] = p.newFacade(t)
	hs := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(hs.Close)
	p.url = hs.URL
	return p
}

// newFacade is another facade process: its own connection and Facade.
func (p *pair) newFacade(t *testing.T) *Facade {
	t.Helper()
	f := New(client.New(p.conn(t, "facade"), client.Config{Source: "toolbus/mcp"}),
		Config{Poll: p.f.cfg.Poll, ProgressEvery: p.f.cfg.ProgressEvery, Insecure: true, Confirm: ConfirmHostUser, MaxTasks: p.f.cfg.MaxTasks,
			QuietHold: p.f.cfg.QuietHold})
	testkit.Stop(t, f.Drain)
	return f
}

func (p *pair) serve(w http.ResponseWriter, r *http.Request) {
	i := int(p.next.Add(1)-1) % 2
	switch r.Header.Get("X-Test-Backend") {
	case "A":
		i = 0
	case "B":
		i = 1
	}
	var method string
	if r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &m)
		method = m.Method
	}
	p.mu.Lock()
	f := p.backend[i]
	p.served = append(p.served, string("AB"[i])+" "+r.Method+" "+method)
	p.mu.Unlock()
	f.Handler().ServeHTTP(w, r)
}

// servedBy returns which process served each request of method.
func (p *pair) servedBy(method string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, s := range p.served {
		if strings.HasSuffix(s, " POST "+method) {
			out = append(out, s[:1])
		}
	}
	return out
}

// rpc posts one JSON-RPC request to backend ("A", "B") as user in
// session s and returns its result or error. Modern requests carry the
// 2026-07-28 _meta (with elicitation declared) and headers; legacy ones
// nothing: the facade answers tasks/* without an MCP session.
func (p *pair) rpc(t *testing.T, backend, s, user, method string, params map[string]any, modern bool) (json.RawMessage, *rpcError) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	if modern {
		params["_meta"] = map[string]any{mcp.MetaKeyProtocolVersion: mcp.ProtocolVersion20260728,
			mcp.MetaKeyClientInfo:         map[string]any{"name": "raw", "version": "1"},
			mcp.MetaKeyClientCapabilities: map[string]any{"elicitation": map[string]any{}}}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.url+"/mcp/"+s, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Toolbus-User", user)
	req.Header.Set("X-Test-Backend", backend)
	if modern {
		req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20260728)
		req.Header.Set(mcp.HeaderMethod, method)
		if name, ok := params["name"].(string); ok {
			req.Header.Set(mcp.HeaderName, name)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if i := bytes.Index(raw, []byte("data: ")); i >= 0 && resp.Header.Get("Content-Type") == "text/event-stream" {
		raw = bytes.TrimSpace(raw[i+len("data: "):])
	}
	var out struct {
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s on %s: HTTP %d %s", method, backend, resp.StatusCode, raw)
	}
	return out.Result, out.Error
}

// task is rpc for a tasks/* request, decoded.
func (p *pair) task(t *testing.T, backend, s, method, id string) mcp.Task {
	t.Helper()
	res, rerr := p.rpc(t, backend, s, "alice", method, map[string]any{"taskId": id}, false)
	if rerr != nil {
		t.Fatalf("%s on %s: %+v", method, backend, rerr)
	}
	var tk mcp.Task
	if err := json.Unmarshal(res, &tk); err != nil {
		t.Fatal(err)
	}
	return tk
}

// startTask creates a task of tool on backend and returns its id.
func (p *pair) startTask(t *testing.T, backend, s, tool string) string {
	t.Helper()
	return p.startTaskTTL(t, backend, s, "alice", tool, 60000)
}

func (p *pair) startTaskTTL(t *testing.T, backend, s, user, tool string, ttl int64) string {
	t.Helper()
	res, rerr := p.rpc(t, backend, s, user, "tools/call",
		map[string]any{"name": tool, "arguments": map[string]any{}, "task": map[string]any{"ttl": ttl}}, false)
	if rerr != nil {
		t.Fatalf("task of %s: %+v", tool, rerr)
	}
	var created mcp.CreateTaskResult
	if err := json.Unmarshal(res, &created); err != nil || created.Task.TaskId == "" || created.Task.Status != mcp.TaskStatusWorking {
		t.Fatalf("create task: %s %v", res, err)
	}
	return created.Task.TaskId
}

// resultText is the text of a tasks/result or tools/call result.
func resultText(t *testing.T, raw json.RawMessage) (string, bool) {
	t.Helper()
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	var s string
	for _, c := range r.Content {
		s += c.Text
	}
	return s, r.IsError
}

// endOf waits for the call.result of call id on ev.
func endOf(t *testing.T, ev *client.Events, id string) bus.Result {
	t.Helper()
	for {
		m := testkit.Recv(t, ev.C, bound, "the call's result")
		var r bus.Result
		if m.Type == bus.TypeCallResult && m.DataAs(&r) == nil && r.ID == id {
			return r
		}
	}
}

// TestTasksTwoFacades (on a 3-node cluster, every bucket R3): a task
// created on A is read, waited for and cancelled on B; tasks/cancel on B
// ends the bus call interrupted; a facade process that closes leaves its
// tasks running on the bus, and a new process answers them.
func TestTasksTwoFacades(t *testing.T) {
	p := newPair(t, true)
	const s = "lb-tasks"
	ev, err := p.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())

	// Created on A, answered on the bus, read and waited for on B.
	start := time.Now()
	id := p.startTask(t, "A", s, "ask_human")
	t.Logf("task created (record written, R3) in %s", time.Since(start))
	replyID, parked := parkedEvent(t, ev, "ask_human")
	if tk := p.task(t, "B", s, "tasks/get", id); tk.Status != mcp.TaskStatusWorking {
		t.Fatalf("tasks/get on B while parked: %+v", tk)
	}
	if err := p.bus.Parked().Answer(t.Context(), "ask_human", s, replyID, parked.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("from A")}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	res, rerr := p.rpc(t, "B", s, "alice", "tasks/result", map[string]any{"taskId": id}, false)
	if rerr != nil {
		t.Fatal(rerr)
	}
	t.Logf("tasks/result on B after the answer: %s", time.Since(start))
	if text, isErr := resultText(t, res); isErr || text != "from A" {
		t.Fatalf("tasks/result on B: %s", res)
	}
	// The record is read directly (allow_direct), possibly from a replica
	// a moment behind the leader whose write tasks/result saw: under load
	// it can still say working for a moment, never for long.
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if tk := p.task(t, "B", s, "tasks/get", id); tk.Status != mcp.TaskStatusCompleted {
			return fmt.Errorf("tasks/get on B after the end: %+v", tk)
		}
		return nil
	})
	// Another user of the session does not see it.
	if _, rerr := p.rpc(t, "B", s, "bob", "tasks/get", map[string]any{"taskId": id}, false); rerr == nil || rerr.Code != mcp.INVALID_PARAMS {
		t.Fatalf("bob's tasks/get of alice's task: %+v", rerr)
	}
	// Nor its result, kept under alice's own key (session 27, red team).
	if res, rerr := p.rpc(t, "B", s, "bob", "tasks/result", map[string]any{"taskId": id}, false); rerr == nil || rerr.Code != mcp.INVALID_PARAMS {
		t.Fatalf("bob's tasks/result of alice's task: %s %+v", res, rerr)
	}

	// Created on A, cancelled on B: the bus call ends interrupted.
	start = time.Now()
	id = p.startTask(t, "A", s, "ask_human")
	t.Logf("task created on a warm process: %s", time.Since(start))
	_, parked = parkedEvent(t, ev, "ask_human")
	start = time.Now()
	if tk := p.task(t, "B", s, "tasks/cancel", id); tk.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel on B: %+v", tk)
	}
	t.Logf("tasks/cancel on B: %s", time.Since(start))
	if r := endOf(t, ev, parked.ID); r.State != bus.StateInterrupted {
		t.Fatalf("after tasks/cancel on B: %+v", r)
	}
	if tk := p.task(t, "A", s, "tasks/get", id); tk.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/get on A after the cancel on B: %+v", tk)
	}
	if _, rerr := p.rpc(t, "A", s, "alice", "tasks/cancel", map[string]any{"taskId": id}, false); rerr == nil {
		t.Fatal("a cancelled task was cancelled again")
	}

	// tasks/list on either process: both tasks, oldest first.
	res, rerr = p.rpc(t, "B", s, "alice", "tasks/list", nil, false)
	var list mcp.ListTasksResult
	if rerr != nil || json.Unmarshal(res, &list) != nil || len(list.Tasks) != 2 || list.Tasks[1].TaskId != id {
		t.Fatalf("tasks/list: %s %+v", res, rerr)
	}

	// A closes (a restart) while its task is parked: the call stays
	// parked on the bus, and the new process answers the task.
	id = p.startTask(t, "A", s, "ask_human")
	replyID, parked = parkedEvent(t, ev, "ask_human")
	p.f.Drain(t.Context())
	p.mu.Lock()
	p.backend[0] = p.newFacade(t)
	p.mu.Unlock()
	if err := p.bus.Parked().Answer(t.Context(), "ask_human", s, replyID, parked.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("after the restart")}); err != nil {
		t.Fatalf("the restart ended the parked call: %v", err)
	}
	if r := endOf(t, ev, parked.ID); r.State != bus.StateSuccess {
		t.Fatalf("the task's call after A closed: %+v", r)
	}
	start = time.Now()
	res, rerr = p.rpc(t, "A", s, "alice", "tasks/result", map[string]any{"taskId": id}, false)
	if rerr != nil {
		t.Fatal(rerr)
	}
	t.Logf("tasks/result on the restarted A (replay of the session's events): %s", time.Since(start))
	if text, isErr := resultText(t, res); isErr || text != "after the restart" {
		t.Fatalf("tasks/result on the restarted A: %s", res)
	}
}

// TestRetryOtherFacade: a 2026-07-28 client (mcp-go's) behind the
// alternating address: its tools/call reaches one process, which answers
// input_required; its retry reaches the other, which answers the park with
// the host user's decision and returns the call's result.
func TestRetryOtherFacade(t *testing.T) {
	p := newPair(t, false)
	const s = "lb-retry"
	if err := p.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	p.resetTools(t, s, map[string]bool{"ops": true})
	el := &elicitor{decision: choiceAllow, asked: make(chan string, 4)}
	env := *p.env
	env.url = p.url
	c := env.connect(t, s, mcp.ProtocolVersion20260728, "alice", mcpclient.WithElicitationHandler(el))
	r, err := call(t, c, "deploy", map[string]any{}, false)
	if err != nil || r.IsError || textOf(r) != "deployed" {
		t.Fatalf("confirmed on the other process: %+v %v", r, err)
	}
	testkit.Recv(t, el.asked, bound, "the elicitation")
	if by := p.servedBy("tools/call"); len(by) != 2 || by[0] == by[1] {
		t.Fatalf("tools/call and its retry served by %v, want two processes", by)
	}
}

// TestRequestStateRefused: a request state is honoured only for the
// session and user it was given to, on any process, also after the
// process that gave it closed; a forged one, another user's or another
// session's is refused and answers nothing.
func TestRequestStateRefused(t *testing.T) {
	p := newPair(t, false)
	const s = "lb-state"
	for _, id := range []string{s, s + "-other"} {
		if err := p.bus.Admin(t.Context(), "session.mode", id, map[string]string{"mode": "default"}, nil); err != nil {
			t.Fatal(err)
		}
		p.resetTools(t, id, map[string]bool{"ops": true})
	}
	ev, err := p.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	call := map[string]any{"name": "deploy", "arguments": map[string]any{}}
	res, rerr := p.rpc(t, "A", s, "alice", "tools/call", call, true)
	var ir struct {
		ResultType   string `json:"resultType"`
		RequestState string `json:"requestState"`
	}
	if rerr != nil || json.Unmarshal(res, &ir) != nil || ir.ResultType != "input_required" || ir.RequestState == "" {
		t.Fatalf("tools/call: %s %+v", res, rerr)
	}
	_, parked := parkedEvent(t, ev, "deploy")
	allow := map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"decision": choiceAllow}}}
	retry := func(backend, session, user, state string) (string, bool) {
		t.Helper()
		res, rerr := p.rpc(t, backend, session, user, "tools/call", map[string]any{"name": "deploy", "arguments": map[string]any{},
			"requestState": state, "inputResponses": allow}, true)
		if rerr != nil {
			t.Fatalf("retry: %+v", rerr)
		}
		return resultText(t, res)
	}
	for _, c := range []struct{ name, session, user, state string }{
		{"another user", s, "bob", ir.RequestState},
		{"another session", s + "-other", "alice", ir.RequestState},
		{"forged", s, "alice", strings.Repeat("0", 32)},
		{"not an id", s, "alice", "../" + ir.RequestState},
	} {
		for _, backend := range []string{"A", "B"} {
			if text, isErr := retry(backend, c.session, c.user, c.state); !isErr || !strings.Contains(text, "names no call") {
				t.Fatalf("%s on %s: %q", c.name, backend, text)
			}
		}
	}
	var list struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := p.bus.Admin(t.Context(), "parked.list", s, nil, &list); err != nil || len(list.Parked) != 1 || list.Parked[0].ID != parked.ID {
		t.Fatalf("after the refused retries the call is not parked alone: %+v %v", list, err)
	}
	// A, which asked, closes (a restart): the call stays parked, and the
	// real retry, on the other process, confirms and returns the result.
	p.f.Drain(t.Context())
	p.mu.Lock()
	p.backend[0] = p.newFacade(t)
	p.mu.Unlock()
	if text, isErr := retry("B", s, "alice", ir.RequestState); isErr || text != "deployed" {
		t.Fatalf("alice's retry on B: %q", text)
	}
}

// TestTaskBounds: at most MaxTasks live records per session and user
// (expired ones do not count and are not answered), a task-augmented call
// past it refused (before anything is published: the record is written
// first); ids that are not the facade's
// find nothing; a tool outside the listing is refused.
func TestTaskBounds(t *testing.T) {
	p := newPairWith(t, false, func(c *Config) { c.MaxTasks = 2 })
	const s = "lb-bounds"
	ev, err := p.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	gone := p.startTaskTTL(t, "A", s, "alice", "hello", 1) // expired by the next request
	p.startTask(t, "B", s, "hello")
	p.startTask(t, "A", s, "hello")
	for range 3 { // the three calls ran
		for m := testkit.Recv(t, ev.C, bound, "a batch.done"); m.Type != bus.TypeBatchDone; m = testkit.Recv(t, ev.C, bound, "a batch.done") {
		}
	}
	res, rerr := p.rpc(t, "B", s, "alice", "tools/call", map[string]any{"name": "hello", "arguments": map[string]any{}, "task": map[string]any{}}, false)
	if rerr == nil || !strings.Contains(rerr.Message, "tasks kept") {
		live, lerr := p.backend[1].kv.listTasks(t.Context(), s, "alice")
		var ids []string
		for _, r := range live {
			ids = append(ids, r.ID+"@"+r.Created.Format(time.RFC3339Nano)+"/"+string(r.Status))
		}
		t.Fatalf("a third live task: %+v, result %s; live now %v (%v), gone %s", rerr, res, ids, lerr, gone)
	}
	p.startTaskTTL(t, "B", s, "bob", "hello", 60000) // bob's own bound
	for _, id := range []string{gone, "../" + gone, strings.Repeat("f", 32), "*"} {
		if _, rerr := p.rpc(t, "A", s, "alice", "tasks/get", map[string]any{"taskId": id}, false); rerr == nil || rerr.Code != mcp.INVALID_PARAMS {
			t.Fatalf("tasks/get %q: %+v", id, rerr)
		}
	}
	if _, rerr := p.rpc(t, "A", s, "alice", "tools/call", map[string]any{"name": "deploy", "task": map[string]any{}}, false); rerr == nil {
		t.Fatal("a task of a tool outside the session's view")
	}
}

// Task creations racing through two facade processes for one session and
// user are admitted exactly up to the bound: the count is one
// compare-and-set index, not what each process happens to list.
func TestTaskBoundAcrossFacades(t *testing.T) {
	p := newPairWith(t, false, func(c *Config) { c.MaxTasks = 2 })
	const s = "lb-race"
	var wg sync.WaitGroup
	var admitted, refused atomic.Int32
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, rerr := p.rpc(t, []string{"A", "B"}[i%2], s, "alice", "tools/call",
				map[string]any{"name": "hello", "arguments": map[string]any{}, "task": map[string]any{"ttl": 60000}}, false)
			switch {
			case rerr == nil:
				admitted.Add(1)
			case strings.Contains(rerr.Message, "tasks kept"):
				refused.Add(1)
			default:
				t.Errorf("task creation: %+v", rerr)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 2 || refused.Load() != 4 {
		t.Fatalf("%d admitted, %d refused; want 2 and 4", admitted.Load(), refused.Load())
	}
}
