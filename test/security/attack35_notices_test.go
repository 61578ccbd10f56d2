package security

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackForgedRunningNotices (session 35, protocol 1.25): under the
// generated permissions a router's running notices reach the agent's
// client on its own inbox (no permission changed: routers publish
// _INBOX.>, an agent subscribes its inbox prefix .>), so a long read-only
// call is not re-sent; and neither the agent nor a worker may publish a
// notice on the agent's inbox: only routers can forge one.
func TestAttackForgedRunningNotices(t *testing.T) {
	d := newDeployment(t, func(c *router.Config) {
		c.Notices = router.Notices{First: 50 * time.Millisecond, Every: 100 * time.Millisecond}
	})
	release := make(chan struct{})
	wl, runs := slowReader(t, d, release)

	// The router's notices, as a router's login sees them on the inbox.
	notices := make(chan *nats.Msg, 256)
	watch := d.conn("router")
	_, err := watch.nc.ChanSubscribe("_INBOX.session-s1.>", notices)
	must(t, err)
	must(t, watch.nc.Flush())

	agent := d.conn("session-s1")
	ac := client.New(agent.nc, client.Config{Source: "test/session-s1", Resend: client.Resend{First: 200 * time.Millisecond, AfterNotice: 2 * time.Second}})
	done := make(chan error, 1)
	go func() {
		_, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "slowread"}}}, client.WithReplyID("n1"))
		done <- err
	}()
	var inbox string
	for n := 0; n < 6; { // 6 notices: 550 ms at least, past two first windows
		m := testkit.Recv(t, notices, bound, "a running notice")
		if s, ok := strings.CutSuffix(m.Subject, bus.RunningSuffix); ok {
			inbox = s
			n++
		}
	}
	// Forged notices: the agent's own connection and a worker's are refused.
	agent.denyPublish(inbox + bus.RunningSuffix)
	wl.denyPublish(inbox + bus.RunningSuffix)
	release <- struct{}{}
	if err := testkit.Recv(t, done, bound, "the call's reply"); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the call ran %d times: the notices did not hold the re-send off", n)
	}
	agent.noViolationsBut(inbox + bus.RunningSuffix)
}

// slowReader starts, on d's worker login (returned), a worker of slowread
// (read only, concurrency safe), whose calls count in runs and wait for a
// token of release, or its close, which the worker's stop does.
func slowReader(t *testing.T, d *deployment, release chan struct{}) (*login, *atomic.Int32) {
	t.Helper()
	wl := d.conn("worker")
	w, err := worker.New(wl.nc, worker.Config{Heartbeat: testHeartbeat})
	must(t, err)
	runs := new(atomic.Int32)
	must(t, w.Handle(bus.ToolDef{Name: "slowread", Description: "Reads slowly.", ReadOnly: true, ConcurrencySafe: true, NoBackground: true,
		Permission: bus.PermissionAllow, InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
		func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &bus.ExecResult{Output: bus.Text("read")}, nil
		}))
	must(t, w.Start(t.Context()))
	testkit.Stop(t, func(ctx context.Context) error { close(release); return w.Drain(ctx) })
	testkit.Recv(t, w.Registered(), bound, "the worker's registration")
	return wl, runs
}
