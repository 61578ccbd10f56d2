package embedded

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/worker"
)

func TestStateInjectedToolsPatchSessionState(t *testing.T) {
	e := newEnv(t, 2)
	var seen []string
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "remember", StateInjected: true, ReadOnly: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"k":{"type":"string"},"v":{}}}`)},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				seen = append(seen, string(c.State))
				var in map[string]json.RawMessage
				_ = json.Unmarshal(c.Input, &in)
				var k string
				_ = json.Unmarshal(in["k"], &k)
				if err := c.PatchState(map[string]json.RawMessage{k: in["v"]}); err != nil {
					return nil, err
				}
				return textResult("ok"), nil
			})
		handle(t, w, bus.ToolDef{Name: "plain", ReadOnly: true}, func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
			if c.State != nil {
				t.Error("a tool that is not state_injected got the state")
			}
			if err := c.PatchState(map[string]int{"x": 1}); err != nil {
				return nil, err
			}
			return textResult("ok"), nil
		})
	})
	e.waitLive("remember", "plain")
	wantSuccess(t, e.call(t, "st", []bus.Call{{ID: "c1", Name: "remember", Input: json.RawMessage(`{"k":"city","v":"Oslo"}`)}}).Results[0], "ok")
	wantSuccess(t, e.call(t, "st", []bus.Call{{ID: "c1", Name: "remember", Input: json.RawMessage(`{"k":"n","v":2}`)}}).Results[0], "ok")
	wantSuccess(t, e.call(t, "st", []bus.Call{{ID: "c1", Name: "remember", Input: json.RawMessage(`{"k":"city","v":null}`)}}).Results[0], "ok")
	if seen[0] != `{}` || seen[2] != `{"city":"Oslo","n":2}` {
		t.Fatalf("states seen by the tool: %v", seen)
	}
	var v struct {
		State groups.Session `json:"state"`
	}
	if err := e.client.Admin(t.Context(), "session.get", "st", nil, &v); err != nil {
		t.Fatal(err)
	}
	if string(v.State.State) != `{"n":2}` {
		t.Fatalf("agent state %s", v.State.State)
	}
	// A patch from a tool that is not state_injected is refused.
	r := e.call(t, "st", []bus.Call{{ID: "c1", Name: "plain"}}).Results[0]
	wantFailure(t, r, bus.StateError, bus.CodeToolError, "Error: tool plain set a state patch but is not state_injected") // refused by the worker library
}
