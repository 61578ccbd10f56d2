package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestTurn: `toolbus turn --format openai` runs the message's tool calls
// and prints the tool messages in the Chat Completions shape.
func TestTurn(t *testing.T) {
	d := newDeployment(t)
	msg := filepath.Join(t.TempDir(), "assistant.json")
	body := `{"role":"assistant","content":null,"tool_calls":[
	  {"id":"call_a","type":"function","function":{"name":"echo","arguments":"{\"text\":\"hi\"}"}},
	  {"id":"call_b","type":"function","function":{"name":"echo","arguments":"{\"text\":"}}]}`
	if err := os.WriteFile(msg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := exec(t.Context(), "turn", "--format", "openai", "--in", msg, "--nats", d.url)
	if err != nil {
		t.Fatalf("run: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	var got struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			Content    string `json:"content"`
		} `json:"messages"`
		Parked []json.RawMessage `json:"parked"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Messages) != 2 || got.Messages[0].ToolCallID != "call_a" || got.Messages[0].Role != "tool" ||
		got.Messages[0].Content != "hi" || got.Messages[1].ToolCallID != "call_b" || len(got.Parked) != 0 {
		t.Fatalf("output: %s", out)
	}
}
