package security

import (
	"context"
	"testing"

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
	id := startTask(t, ac)
	close(release)
	if ts, err := ac.Tasks().Wait(testCtx(t), "s1", bound, id); err != nil || ts[0].State != bus.StateSuccess {
		t.Fatalf("the task's end: %+v %v", ts, err)
	}
	// What the server sent the router's connections for one output read.
	output := func() int64 {
		from := routerOutMsgs(t, d)
		_, out, err := ac.Tasks().Output(testCtx(t), "s1", id)
		if err != nil || len(out) != 1 || out[0].Text != "halfway" {
			t.Fatalf("the task's output: %+v %v", out, err)
		}
		return routerOutMsgs(t, d) - from
	}
	before := output()

	floodEvents(t, ac) // about 19,000 events in s1 after the task's end
	after := output()
	t.Logf("an ended task's output: %d messages to the router before the flood, %d after", before, after)
	if after > before+300 { // at most one fetch (256) past the task's end
		t.Fatalf("an ended task's output read the session's later events: %d messages to the router before the flood, %d after", before, after)
	}
}
