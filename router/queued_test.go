package router_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// queuedRig is a deployment of a router handling one message at once, queuing at most
// queued more, with a worker's read-only tool "hold": each call sends its id
// on the channel returned and blocks until given a token on release or
// until end; and a client connection watching every inbox (replies,
// notices) in order.
func queuedRig(t *testing.T, queued int) (d *xtest.Deployment, entered chan string, release chan struct{}, end func(), nc *nats.Conn, inbox chan *nats.Msg) {
	t.Helper()
	d = xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{MaxInflight: 1, MaxQueued: queued, MaxSessionInflight: -1}})
	entered, release = make(chan string, 16), make(chan struct{})
	end = sync.OnceFunc(func() { close(release) })
	t.Cleanup(end)
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return w.Handle(bus.ToolDef{Name: "hold", Description: "Test tool hold.", InputSchema: json.RawMessage(`{"type":"object"}`),
			ReadOnly: true, ConcurrencySafe: true, NoBackground: true, Permission: bus.PermissionAllow},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				entered <- c.ID
				select {
				case <-release:
				case <-ctx.Done():
				}
				return &bus.ExecResult{Output: []bus.Block{{Type: "text", Text: c.ID}}}, nil
			})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "hold"); err != nil {
		t.Fatal(err)
	}
	if nc, err = d.Connect(t.Context(), xtest.RoleClient); err != nil {
		t.Fatal(err)
	}
	inbox = make(chan *nats.Msg, 4096)
	if _, err := nc.ChanSubscribe("_INBOX.>", inbox); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return d, entered, release, end, nc, inbox
}

// TestQueuedBatchNotices (queued36): a batch that waits for a slot behind a
// running one gets its first notice 2 s (+ a tick of 250 ms) after the router
// read it, not 2 s after it took it (docs/protocol.md 3.2.1, 1.26), so a
// client re-sending after 2.5 s of silence does not re-send: one copy sent,
// one execution.
func TestQueuedBatchNotices(t *testing.T) {
	_, entered, release, end, nc, inbox := queuedRig(t, 1)
	sendBatch(t, nc, "q1", "_INBOX.q.q1", "a:hold") // holds the router's one slot
	testkit.Recv(t, entered, 30*time.Second, "the first batch's call")
	c := client.New(nc, client.Config{Source: "test/agent", Resend: client.Resend{First: 2500 * time.Millisecond, AfterNotice: time.Minute}})
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "b", Name: "hold", Input: json.RawMessage(`{}`)}}}, client.WithReplyID("q2"))
		done <- err
	}()
	time.AfterFunc(time.Second, func() { release <- struct{}{} }) // q1 ends: q2 was queued a second
	for {
		m := testkit.Recv(t, inbox, 30*time.Second, "q2's notice")
		if e, err := bus.Decode(m); err == nil && e.Type == bus.TypeCallRunning && e.ReplyID == "q2" {
			break
		}
	}
	el := time.Since(start)
	end()
	if err := testkit.Recv(t, done, 30*time.Second, "q2's reply"); err != nil {
		t.Fatal(err)
	}
	t.Logf("the queued batch's first notice came %v after it was sent", el)
	if el > 2*time.Second+250*time.Millisecond+100*time.Millisecond { // 100 ms: the send and the notice's way
		t.Errorf("the queued batch's first notice came %v after it was sent, want 2.25 s", el)
	}
	if n := len(entered); n != 1 { // q2's b; a re-sent copy would run b again
		t.Errorf("%d more executions after q1's, want 1 (no re-send)", n)
	}
}

// TestAttackPublishedBatchesHoldNoBatch (queued36): batches published
// without a reply subject, past the router's slots, used to wait on its
// subscription's goroutine (back-pressure), and a batch with a reply behind
// them waited unseen: no notice, no busy, then a re-send. They now wait
// with the others, at most MaxQueued: the batch behind them is queued too,
// and answered busy when no slot comes within 2 s.
func TestAttackPublishedBatchesHoldNoBatch(t *testing.T) {
	_, entered, _, _, nc, inbox := queuedRig(t, 8)
	sendBatch(t, nc, "p0", "_INBOX.q.p0", "a:hold")
	testkit.Recv(t, entered, 30*time.Second, "the first batch's call")
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		sendBatch(t, nc, id, "", "a:hold")
	}
	start := time.Now()
	sendBatch(t, nc, "r1", "_INBOX.q.r1", "a:hold")
	m := testkit.Recv(t, inbox, 30*time.Second, "r1's answer")
	for m.Subject != "_INBOX.q.r1" { // p0's notices, the connection's own inbox traffic
		m = testkit.Recv(t, inbox, 30*time.Second, "r1's answer")
	}
	e, err := bus.Decode(m)
	var be bus.Error
	if err != nil || e.Type != bus.TypeError || e.DataAs(&be) != nil || be.Code != bus.CodeBusy {
		t.Fatalf("%s %+v %v: want r1's busy", m.Subject, e, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("busy after %v, want 2 s", el)
	}
}
