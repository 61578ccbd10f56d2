package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// TestStatusListsWorkers: the status verb names each tool's live workers
// (protocol 1.29), sorted, from the beats it counts: two Go workers of one
// tool and a worker of another that only sends its registration beats, as the Python
// and Java SDKs do (no micro discovery); past bus.StatusWorkers ids the
// list stops and live_workers still counts them all.
func TestStatusListsWorkers(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	for _, id := range []string{"go-b", "go-a"} {
		if _, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Config: worker.Config{ID: id}, Setup: func(w *worker.Worker) error {
			return worker.Register(w, bus.ToolDef{Name: "greet", Description: "Greets."},
				func(context.Context, *worker.Call, noInput) (string, error) { return "hi", nil })
		}}); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := d.Connect(t.Context(), xtest.RoleWorker)
	if err != nil {
		t.Fatal(err)
	}
	beat := func(id, tool string) {
		t.Helper()
		def := bus.ToolDef{Name: tool, Description: "A tool.", InputSchema: json.RawMessage(`{"type":"object"}`)}
		ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/"+id, bus.Register{Worker: id, Tools: []bus.ToolDef{def}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := ev.Msg(d.Subjects().Workers.Register(tool))
		if err != nil {
			t.Fatal(err)
		}
		reply, err := nc.RequestMsgWithContext(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		var ack bus.RegisterAck
		if e, err := bus.Decode(reply); err != nil || e.DataAs(&ack) != nil || len(ack.Accepted) != 1 {
			t.Fatalf("beat of %s: %+v %v", id, e, err)
		}
	}
	beat("py-1", "py_add")
	var many []string
	for i := range bus.StatusWorkers + 1 {
		many = append(many, fmt.Sprintf("m%03d", i))
		beat(many[i], "many")
	}
	err = d.EveryStatus(t.Context(), func(st bus.Status) error {
		for _, want := range []bus.ToolStatus{
			{Name: "greet", LiveWorkers: 2, Workers: []string{"go-a", "go-b"}},
			{Name: "py_add", LiveWorkers: 1, Workers: []string{"py-1"}},
			{Name: "many", LiveWorkers: len(many), Workers: many[:bus.StatusWorkers]},
		} {
			i := slices.IndexFunc(st.Tools, func(t bus.ToolStatus) bool { return t.Name == want.Name })
			if i < 0 || st.Tools[i].LiveWorkers != want.LiveWorkers || !slices.Equal(st.Tools[i].Workers, want.Workers) {
				return fmt.Errorf("status of %s: %+v, want %d live, workers %v", want.Name, st.Tools, want.LiveWorkers, want.Workers)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
