package embedded

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TestWorkerExec speaks io.toolbus.exec to a worker directly, as a router
// would (docs/protocol.md 5.1): a good request gets io.toolbus.exec.result with
// the runtime context delivered; one the worker cannot decode gets
// io.toolbus.error bad_event.
func TestWorkerExec(t *testing.T) {
	e := newEnv(t, 1)
	var rec recorder
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "direct", ConcurrencySafe: true},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				rec.record(c)
				return &bus.ExecResult{Output: bus.Text("direct " + string(c.Input)), Metadata: json.RawMessage(`{"m":1}`)}, nil
			})
	})
	e.waitLive("direct")
	subject := e.client.Subjects().Workers.Exec("direct")
	execEvent := func(t *testing.T, req bus.ExecRequest) *bus.Event {
		ev := newEvent(t, bus.TypeExec, req)
		ev.SessionID, ev.ReplyID, ev.ToolCallID = "exec-s", "exec-r", req.Call.ID
		return ev
	}

	t.Run("good request", func(t *testing.T) {
		ev := execEvent(t, bus.ExecRequest{Call: bus.Call{ID: "x1", Name: "direct", Input: json.RawMessage(`{"a":1}`)},
			User: json.RawMessage(`"carol"`), Context: json.RawMessage(`{"tenant":"t1"}`), Attempt: 1})
		reply := e.request(t, eventMsg(t, subject, ev))
		if reply.Type != bus.TypeExecResult {
			t.Fatalf("reply %s: %s", reply.Type, reply.Data)
		}
		var xr bus.ExecResult
		if err := json.Unmarshal(reply.Data, &xr); err != nil {
			t.Fatal(err)
		}
		if xr.State != bus.StateSuccess || len(xr.Output) != 1 || xr.Output[0].Text != `direct {"a":1}` || string(xr.Metadata) != `{"m":1}` {
			t.Fatalf("exec.result %s", reply.Data)
		}
		if reply.SessionID != "exec-s" || reply.ReplyID != "exec-r" || reply.ToolCallID != "x1" {
			t.Errorf("exec.result attributes session %q reply %q call %q", reply.SessionID, reply.ReplyID, reply.ToolCallID)
		}
		got, _ := rec.get("exec-s", "x1")
		if string(got.User) != `"carol"` || string(got.Context) != `{"tenant":"t1"}` || got.ReplyID != "exec-r" {
			t.Errorf("worker saw %+v", got)
		}
	})

	tests := []struct {
		name string
		msg  func(t *testing.T) *nats.Msg
	}{
		{"not JSON", func(*testing.T) *nats.Msg { return rawMsg(subject, []byte("garbage")) }},
		{"not a CloudEvent", func(*testing.T) *nats.Msg { return rawMsg(subject, []byte(`{"call":{"id":"x","name":"direct"}}`)) }},
		{"wrong type", func(t *testing.T) *nats.Msg {
			ev := execEvent(t, bus.ExecRequest{Call: bus.Call{ID: "x2", Name: "direct"}, Attempt: 1})
			ev.Type = bus.TypeCallBatch
			return eventMsg(t, subject, ev)
		}},
		{"data not an exec request", func(t *testing.T) *nats.Msg {
			ev := newEvent(t, bus.TypeExec, json.RawMessage(`[1,2]`))
			ev.SessionID, ev.ReplyID = "exec-s", "exec-r"
			return eventMsg(t, subject, ev)
		}},
		{"call for another tool", func(t *testing.T) *nats.Msg {
			return eventMsg(t, subject, execEvent(t, bus.ExecRequest{Call: bus.Call{ID: "x3", Name: "other"}, Attempt: 1}))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := rec.runs.Load()
			wantErrorEvent(t, e.request(t, tt.msg(t)), bus.CodeBadEvent)
			if rec.runs.Load() != runs {
				t.Fatal("the tool ran on a request the worker could not decode")
			}
		})
	}
}
