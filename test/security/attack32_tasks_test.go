package security

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackTaskOutputScansSession (session 32, red team on 5.10): a
// task's `output` reads its progress from the session's events since the
// task started. s1's agent lets a background task end, then floods its own
// session with events (batches of 64 calls with "events": "calls") and
// asks for the ended task's output again and again: each read must not
// scan every event the session had since, only those up to the task's end
// (counted as the messages the server sends the router for one read).
func TestAttackTaskOutputScansSession(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	release := make(chan struct{})
	startTool(t, d, bus.ToolDef{Name: "slow", Description: "Runs past its timeout.", ReadOnly: true, ConcurrencySafe: true,
		TimeoutMS: 200, Background: true},
		func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
			_ = c.Progress(bus.Text("halfway")...)
			<-release
			return &bus.ExecResult{Output: bus.Text("slow done")}, nil
		})
	ac := d.conn("session-s1").client()
	rep, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "slow"}}})
	must(t, err)
	if rep.Results[0].Task == nil {
		t.Fatalf("not backgrounded: %+v", rep.Results[0])
	}
	id := rep.Results[0].Task.ID
	close(release)
	if ts, err := ac.Tasks().Wait(testCtx(t), "s1", bound, id); err != nil || ts[0].State != bus.StateSuccess {
		t.Fatalf("the task's end: %+v %v", ts, err)
	}
	// What the server sent the router's connections for one output read.
	output := func() int64 {
		sent := func() (n int64) {
			cz, err := d.srv.Connz(&server.ConnzOptions{Limit: 1024})
			must(t, err)
			for _, c := range cz.Conns {
				if c.Name == "test-router" {
					n += c.OutMsgs
				}
			}
			return n
		}
		from := sent()
		_, out, err := ac.Tasks().Output(testCtx(t), "s1", id)
		if err != nil || len(out) != 1 || out[0].Text != "halfway" {
			t.Fatalf("the task's output: %+v %v", out, err)
		}
		return sent() - from
	}
	before := output()

	calls := make([]bus.Call, 64)
	for i := range calls {
		calls[i] = bus.Call{ID: fmt.Sprintf("c%d", i), Name: "greet"}
	}
	for range 100 { // 100 batches: about 19,000 events in s1 after the task's end
		if _, err := ac.Call(testCtx(t), "s1", bus.Batch{Events: "calls", Calls: calls}); err != nil {
			t.Fatal(err)
		}
	}
	after := output()
	t.Logf("an ended task's output: %d messages to the router before the flood, %d after", before, after)
	if after > before+300 { // at most one fetch (256) past the task's end
		t.Fatalf("an ended task's output read the session's later events: %d messages to the router before the flood, %d after", before, after)
	}
}
