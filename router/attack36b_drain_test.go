package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAttack36bDrainQueuedPublished (redteam36b, on queued36): a batch
// without a reply subject that the router read and queued when its drain
// began is run by the draining router, not dropped (no one would send it
// again: under 1.25 a queued batch found the router draining and was
// answered busy, to no one), and the drain waits for it.
func TestAttack36bDrainQueuedPublished(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{MaxInflight: 1, MaxQueued: 1, MaxSessionInflight: -1}})
	entered, release := make(chan string, 16), make(chan struct{}, 16)
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
	nc, err := d.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	r1 := make(chan *nats.Msg, 1)
	if _, err := nc.ChanSubscribe("_INBOX.q.r1", r1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sendBatch(t, nc, "p0", "", "p0:hold") // holds the one slot
	testkit.Recv(t, entered, 30*time.Second, "p0's call")
	sendBatch(t, nc, "p1", "", "p1:hold")
	sendBatch(t, nc, "r1", "_INBOX.q.r1", "r:hold")
	testkit.Recv(t, r1, 30*time.Second, "r1's busy") // read after p1, past the queue: p1 is queued
	drained := make(chan error, 1)
	go func() { drained <- d.Routers[0].Drain(t.Context()) }()
	e, err := bus.NewEvent(bus.TypeCallBatch, "test/agent", bus.Batch{Calls: []bus.Call{{ID: "r", Name: "hold", Input: json.RawMessage(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID = "s1"
	m, err := e.Msg(bus.NewSubjects("").Call("s1"))
	if err != nil {
		t.Fatal(err)
	}
	for until := time.Now().Add(30 * time.Second); ; { // busy at once while the router reads
		_, err := nc.RequestMsg(m, 30*time.Second)
		if errors.Is(err, nats.ErrNoResponders) { // it drains
			break
		}
		if time.Now().After(until) {
			t.Fatalf("the router still reads batches 30 s after its drain began: %v", err)
		}
	}
	release <- struct{}{} // p0 ends; p1 takes the slot
	if id := testkit.Recv(t, entered, 30*time.Second, "p1's call"); id != "p1" {
		t.Fatalf("%s ran, want p1", id)
	}
	release <- struct{}{}
	if err := testkit.Recv(t, drained, 30*time.Second, "the drain"); err != nil {
		t.Fatal(err)
	}
}
