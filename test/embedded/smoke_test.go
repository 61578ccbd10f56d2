package embedded

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

func TestSmokeEcho(t *testing.T) {
	e := newEnv(t, 1)
	e.addWorker(func(w *worker.Worker) {
		if err := builtin.RegisterWith(t.Context(), w, builtin.Config{}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("echo", "get_current_time")
	reply, err := e.client.Call(context.Background(), "s1", bus.Batch{Calls: []bus.Call{
		{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)},
		{ID: "c2", Name: "get_current_time", Input: json.RawMessage(`"{\"timezone\":\"UTC\"}"`)},
		{ID: "c3", Name: "nope"},
		{ID: "c4", Name: "echo", Input: json.RawMessage(`{"text":5}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(reply, "", " ")
	t.Logf("%s", b)
	if reply.Results[0].Output[0].Text != "hi" {
		t.Fatal("echo")
	}
}
