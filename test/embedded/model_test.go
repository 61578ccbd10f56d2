package embedded

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TestModelTurn runs an Anthropic assistant turn through a real router with
// client.Turn: its tool_use blocks become one batch, the malformed input of
// one becomes that call's invalid_input (not a dropped call), and the reply
// comes back as the one user message of tool_result blocks the Messages
// API expects, in call order, with the error flag on the failed call.
func TestModelTurn(t *testing.T) {
	e := newEnv(t, 1)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "weather", ReadOnly: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				var in struct{ City string }
				_ = json.Unmarshal(c.Input, &in)
				return textResult("rain in " + in.City), nil
			})
	})
	e.waitLive("weather")
	msg := `{"role":"assistant","content":[{"type":"text","text":"Checking."},
	  {"type":"tool_use","id":"toolu_01","name":"weather","input":{"city":"Oslo"}},
	  {"type":"tool_use","id":"toolu_02","name":"weather","input":{"city":7}}]}`
	reply, err := e.client.Turn(testCtx(t), "model-turn", bus.FormatAnthropic, []byte(msg), bus.Batch{})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Messages) != 1 || len(reply.Parked) != 0 {
		t.Fatalf("reply = %d messages, %d parked", len(reply.Messages), len(reply.Parked))
	}
	var m struct {
		Role    string `json:"role"`
		Content []struct {
			Type      string `json:"type"`
			ToolUseID string `json:"tool_use_id"`
			IsError   bool   `json:"is_error"`
			Content   []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"content"`
	}
	if err := json.Unmarshal(reply.Messages[0], &m); err != nil {
		t.Fatal(err)
	}
	if m.Role != "user" || len(m.Content) != 2 {
		t.Fatalf("message = %s", reply.Messages[0])
	}
	ok, bad := m.Content[0], m.Content[1]
	if ok.ToolUseID != "toolu_01" || ok.IsError || ok.Content[0].Text != "rain in Oslo" {
		t.Errorf("first result = %+v", ok)
	}
	if bad.ToolUseID != "toolu_02" || !bad.IsError || !strings.Contains(bad.Content[0].Text, "Input validation failed for tool 'weather'") {
		t.Errorf("second result = %+v", bad)
	}
}
