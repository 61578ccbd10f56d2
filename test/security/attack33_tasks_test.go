package security

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackTaskOutputPolled (session 33, red team on 5.10): a read of a
// running task's output scanned every event of its session since the task
// started, so an agent that wrote many events (batches of 64 calls with
// "events": "calls") and then polled the task had each poll cost the router
// all of them again. A router now goes on from where its last read of the
// task ended: after the first read, a poll costs the events since (counted
// as the messages the server sends the router for one read), and the
// output is still whole, later progress included.
func TestAttackTaskOutputPolled(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	more, release := make(chan struct{}), make(chan struct{})
	startTool(t, d, bus.ToolDef{Name: "slow", Description: "Runs past its timeout.", ReadOnly: true, ConcurrencySafe: true,
		TimeoutMS: 200, Background: true},
		func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
			_ = c.Progress(bus.Text("halfway")...)
			<-more
			_ = c.Progress(bus.Text("nearly")...)
			<-release
			return &bus.ExecResult{Output: bus.Text("slow done")}, nil
		})
	defer close(release)
	ac := d.conn("session-s1").client()
	id := startTask(t, ac)
	floodEvents(t, ac) // about 19,000 events in s1 while the task runs
	output := func(want int) (int64, []bus.Block) {
		from := routerOutMsgs(t, d)
		_, out, err := ac.Tasks().Output(testCtx(t), "s1", id)
		must(t, err)
		if len(out) > want || out[0].Text != "halfway" {
			t.Fatalf("the task's output: %+v", out)
		}
		return routerOutMsgs(t, d) - from, out
	}
	first, _ := output(1)
	second, _ := output(1)
	t.Logf("a running task's output after the flood: %d messages to the router for the first read, %d for the next", first, second)
	if second > 300 {
		t.Fatalf("a poll of a running task read its session's events again: %d messages to the router for the first read, %d for the next", first, second)
	}
	close(more)
	deadline := time.Now().Add(bound)
	for {
		if _, out := output(2); len(out) == 2 && out[1].Text == "nearly" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the progress after the first reads never came in the output")
		}
	}
}

// routerOutMsgs is how many messages the server has sent the router's
// connections.
func routerOutMsgs(t *testing.T, d *deployment) (n int64) {
	t.Helper()
	cz, err := d.srv.Connz(&server.ConnzOptions{Limit: 1024})
	must(t, err)
	for _, c := range cz.Conns {
		if c.Name == "test-router" {
			n += c.OutMsgs
		}
	}
	return n
}

// startTask sends s1's call of the background tool slow and returns its
// task's id.
func startTask(t *testing.T, ac *client.Client) string {
	t.Helper()
	rep, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "slow"}}})
	must(t, err)
	if rep.Results[0].Task == nil {
		t.Fatalf("not backgrounded: %+v", rep.Results[0])
	}
	return rep.Results[0].Task.ID
}

// floodEvents sends s1 100 batches of 64 calls with "events": "calls".
func floodEvents(t *testing.T, ac *client.Client) {
	t.Helper()
	calls := make([]bus.Call, 64)
	for i := range calls {
		calls[i] = bus.Call{ID: fmt.Sprintf("c%d", i), Name: "greet"}
	}
	for range 100 {
		if _, err := ac.Call(testCtx(t), "s1", bus.Batch{Events: "calls", Calls: calls}); err != nil {
			t.Fatal(err)
		}
	}
}
