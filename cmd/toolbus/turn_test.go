package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
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

// TestTurnParkedAndWait: a turn whose call parks prints the command that
// answers it and exits with status 3 (parkedError); with --wait it prints
// the call's progress as it comes and, once confirmed from elsewhere, the
// whole turn's messages.
func TestTurnParkedAndWait(t *testing.T) {
	d := newDeployment(t)
	_, err := d.x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "steps", Description: "Work in steps."},
			func(_ context.Context, c *worker.Call, _ struct{}) (string, error) {
				for _, s := range []string{"step one", "step two"} {
					if err := c.Progress(bus.Block{Type: "text", Text: s}); err != nil {
						return "", err
					}
				}
				return "all done", nil
			})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.x.WaitLive(t.Context(), "steps"); err != nil {
		t.Fatal(err)
	}
	msg := func(id string) string {
		f := filepath.Join(t.TempDir(), id+".json")
		body := `{"role":"assistant","tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"steps","arguments":"{}"}}]}`
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	out, errOut, err := exec(t.Context(), "turn", "--in", msg("call_1"), "--session", "tw", "--nats", d.url)
	var parked *parkedError
	if !errors.As(err, &parked) || parked.ExitCode() != 3 || !strings.Contains(errOut, "call call_1 of steps parked, waiting for a confirmation: toolbus confirm call_1 [--deny]") ||
		!strings.Contains(out, `"messages": []`) || !strings.Contains(out, `"id": "call_1"`) {
		t.Fatalf("turn with a parked call: %v\nstdout %s\nstderr %s", err, out, errOut)
	}

	stdout, stderr, stop := background(t, "turn", "--wait", "--in", msg("call_2"), "--session", "tw", "--nats", d.url)
	waitOutput(t, stderr, "waiting for 1 parked call(s)...")
	if _, _, err := exec(t.Context(), "confirm", "call_2", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stderr, "progress call_2 #")
	waitOutput(t, stdout, `"reply_id"`)
	if err := stop(); err != nil {
		t.Fatalf("turn --wait: %v\nstderr %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), ": step two\n") || !strings.Contains(stdout.String(), `"content": "all done"`) || !strings.Contains(stdout.String(), `"parked": []`) {
		t.Fatalf("turn --wait:\nstdout %s\nstderr %s", stdout.String(), stderr.String())
	}
	// The parked call is told once: the reply and the call.parked event
	// both carry it.
	if n := strings.Count(stderr.String(), "call call_2 of steps"); n != 1 {
		t.Fatalf("turn --wait told the parked call %d times:\n%s", n, stderr.String())
	}
}
