package facade

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
)

// detailedTask is a tasks/get answer as a 2026-07-28 client reads it
// (the tasks extension's DetailedTask).
type detailedTask struct {
	TaskID         string                     `json:"taskId"`
	Status         mcp.TaskStatus             `json:"status"`
	ResultType     string                     `json:"resultType"`
	TTLMs          *int64                     `json:"ttlMs"`
	PollIntervalMs *int64                     `json:"pollIntervalMs"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests"`
	Result         json.RawMessage            `json:"result"`
}

// pollTask polls tasks/get on backend (at the task's pollIntervalMs)
// until the task has status want.
func (p *pair) pollTask(t *testing.T, backend, s, id string, want mcp.TaskStatus) detailedTask {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		res, rerr := p.rpc(t, backend, s, "alice", "tasks/get", map[string]any{"taskId": id}, true)
		if rerr != nil {
			t.Fatalf("tasks/get: %+v", rerr)
		}
		var d detailedTask
		if err := json.Unmarshal(res, &d); err != nil {
			t.Fatal(err)
		}
		if d.Status == want {
			return d
		}
		if d.Status.IsTerminal() || time.Now().After(deadline) {
			t.Fatalf("task %s is %s, want %s: %s", id, d.Status, want, res)
		}
		if d.PollIntervalMs == nil || *d.PollIntervalMs <= 0 {
			t.Fatalf("tasks/get without pollIntervalMs: %s", res)
		}
		time.Sleep(time.Duration(*d.PollIntervalMs) * time.Millisecond) // the interval the server asks for
	}
}

// TestTaskUpdateConfirms (issue 29, MCP tasks): a task's call parks for
// a confirmation; the task is input_required, tasks/get (on the other
// process) shows the confirmation as an elicitation under
// inputRequests; another user's tasks/update of it is refused and an
// unknown key is ignored; the host's tasks/update with "allow" answers the
// park, and tasks/get returns the tool's result inline.
func TestTaskUpdateConfirms(t *testing.T) {
	p := newPair(t, false)
	s := "task-update"
	if err := p.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	p.resetTools(t, s, map[string]bool{"ops": true})
	id := p.startTask(t, "A", s, "deploy")
	d := p.pollTask(t, "B", s, id, mcp.TaskStatusInputRequired)
	if len(d.InputRequests) != 1 || d.ResultType != string(mcp.ResultTypeComplete) || d.TTLMs == nil {
		t.Fatalf("input_required task: %+v", d)
	}
	var key string
	var req struct {
		Method string                `json:"method"`
		Params mcp.ElicitationParams `json:"params"`
	}
	for k, raw := range d.InputRequests {
		key = k
		if err := json.Unmarshal(raw, &req); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(key, "confirm-") || req.Method != string(mcp.MethodElicitationCreate) || !strings.Contains(req.Params.Message, "deploy") {
		t.Fatalf("input request %s: %+v", key, req)
	}
	allow := map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "allow"}}}

	// Another user cannot answer it: the task is not bob's.
	if _, rerr := p.rpc(t, "B", s, "bob", "tasks/update", map[string]any{"taskId": id, "inputResponses": allow}, true); rerr == nil || rerr.Code != mcp.INVALID_PARAMS {
		t.Fatalf("bob's tasks/update of alice's task: %+v", rerr)
	}
	// An unknown key is ignored.
	if _, rerr := p.rpc(t, "A", s, "alice", "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{"confirm-forged": map[string]any{"action": "accept", "content": map[string]any{"decision": "allow"}}}}, true); rerr != nil {
		t.Fatalf("tasks/update with an unknown key: %+v", rerr)
	}
	if d := p.pollTask(t, "A", s, id, mcp.TaskStatusInputRequired); len(d.InputRequests) != 1 {
		t.Fatalf("after an unknown key: %+v", d)
	}

	res, rerr := p.rpc(t, "B", s, "alice", "tasks/update", map[string]any{"taskId": id, "inputResponses": allow}, true)
	if rerr != nil || !strings.Contains(string(res), `"resultType":"complete"`) {
		t.Fatalf("tasks/update: %s %+v", res, rerr)
	}
	d = p.pollTask(t, "A", s, id, mcp.TaskStatusCompleted)
	if text, isErr := resultText(t, d.Result); text != "deployed" || isErr {
		t.Fatalf("completed task's inline result: %s", d.Result)
	}
}

// TestTaskNotificationsStdio: over stdio a task's host is told each
// change (notifications/tasks/status): input_required with the
// confirmation under inputRequests, answered with tasks/update on the
// same pipe, then completed.
func TestTaskNotificationsStdio(t *testing.T) {
	e := newEnv(t)
	s := "task-notify"
	if err := e.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	e.resetTools(t, s, map[string]bool{"ops": true})
	c := e.stdioClient(t, s, "alice")
	statuses := make(chan map[string]any, 16)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == mcp.MethodNotificationTasksStatus {
			statuses <- n.Params.AdditionalFields
		}
	})
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	id := startTaskOn(t, c, "deploy")
	next := func(want mcp.TaskStatus) map[string]any {
		t.Helper()
		for {
			st := testkit.Recv(t, statuses, bound, "notifications/tasks/status "+string(want))
			if st["taskId"] != id {
				t.Fatalf("a notification of another task: %v", st)
			}
			if st["status"] == string(want) {
				return st
			}
		}
	}
	st := next(mcp.TaskStatusInputRequired)
	reqs, _ := st["inputRequests"].(map[string]any)
	var key string
	for k := range reqs {
		key = k
	}
	if len(reqs) != 1 || !strings.HasPrefix(key, "confirm-") {
		t.Fatalf("input_required notification: %v", st)
	}
	resp, err := c.GetTransport().SendRequest(t.Context(), transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId(int64(77)), Method: methodTasksUpdate, Params: map[string]any{"taskId": id,
			"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "allow"}}}}})
	if err != nil || resp.Error != nil {
		t.Fatalf("tasks/update over stdio: %v %+v", err, resp.Error)
	}
	next(mcp.TaskStatusCompleted)
	if r := waitTask(t, c, id); r.IsError || textOf(&mcp.CallToolResult{Content: r.Content}) != "deployed" {
		t.Fatalf("task result %+v", r)
	}
}

// TestDetailedTask: what tasks/get shows of a record, per status and era.
func TestDetailedTask(t *testing.T) {
	now := time.Now()
	base := func(st mcp.TaskStatus) *taskRecord {
		return &taskRecord{ID: "0123456789abcdef0123456789abcdef", Status: st, Created: now, Updated: now, TTLMS: 60000,
			Result: json.RawMessage(`{"content":[{"type":"text","text":"ok"}],"isError":false}`), Error: "boom",
			Inputs: map[string]taskInput{"confirm-p1": {Kind: inputConfirm, Request: json.RawMessage(`{"method":"elicitation/create"}`)}}}
	}
	for _, c := range []struct {
		status mcp.TaskStatus
		modern bool
		has    []string
		hasNot []string
	}{
		{mcp.TaskStatusInputRequired, false, []string{"inputRequests", "ttl", "pollInterval"}, []string{"result", "ttlMs"}},
		{mcp.TaskStatusInputRequired, true, []string{"inputRequests", "ttlMs", "pollIntervalMs"}, []string{"result", "error"}},
		{mcp.TaskStatusWorking, true, []string{"ttlMs"}, []string{"inputRequests", "result"}},
		{mcp.TaskStatusCompleted, true, []string{"result"}, []string{"error", "inputRequests"}},
		{mcp.TaskStatusCompleted, false, nil, []string{"result", "error"}},
		{mcp.TaskStatusFailed, true, []string{"error"}, []string{"result"}},
	} {
		var got map[string]json.RawMessage
		raw, _ := json.Marshal(base(c.status).detailed(c.modern))
		_ = json.Unmarshal(raw, &got)
		for _, k := range c.has {
			if _, ok := got[k]; !ok {
				t.Errorf("%s modern=%v: no %s in %v", c.status, c.modern, k, got)
			}
		}
		for _, k := range c.hasNot {
			if _, ok := got[k]; ok {
				t.Errorf("%s modern=%v: %s in %v", c.status, c.modern, k, got)
			}
		}
	}
}
