package security

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// TestFacadeTasks: on the generated configuration the facade's own login
// stores MCP tasks in its bucket (created by the router) and answers
// them, within its permissions; it can neither delete nor purge that
// bucket.
func TestFacadeTasks(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	url, fl := d.mcpFacade(t)
	c := mcpConnect(t, url+"/mcp/s1", hostToken, &hostDecides{asked: make(chan string, 4)})
	resp, err := c.GetTransport().SendRequest(testCtx(t), transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId("task-1"), Method: string(mcp.MethodToolsCall),
		Params: map[string]any{"name": "greet", "arguments": map[string]any{}, "task": map[string]any{}}})
	if err != nil || resp.Error != nil {
		t.Fatalf("task-augmented tools/call: %v %+v", err, resp.Error)
	}
	var created mcp.CreateTaskResult
	must(t, json.Unmarshal(resp.Result, &created))
	st, err := c.WaitForTask(testCtx(t), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: created.Task.TaskId}}, 50*time.Millisecond)
	if err != nil || st.Status != mcp.TaskStatusCompleted {
		t.Fatalf("task: %+v %v", st, err)
	}
	res, err := c.TaskResult(testCtx(t), mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: created.Task.TaskId}})
	if err != nil || len(res.Content) != 1 || res.Content[0].(mcp.TextContent).Text != "hello" {
		t.Fatalf("tasks/result: %+v %v", res, err)
	}
	fl.noViolations()
	for _, s := range []string{"$JS.API.STREAM.DELETE.KV_toolbus_mcp", "$JS.API.STREAM.PURGE.KV_toolbus_mcp",
		"$JS.API.STREAM.UPDATE.KV_toolbus_mcp", "$JS.API.STREAM.MSG.DELETE.KV_toolbus_mcp"} {
		fl.denyPublish(s)
	}
}
