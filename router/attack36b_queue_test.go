package router_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack36bPublishedFloodPastQueue (redteam36b, on queued36's fix): the
// batches without a reply subject past MaxQueued waited for a slot on the
// call subscription's goroutine, so one more than the slots and the queue
// (with the sessions' shares: 17 sessions at the defaults, 512 each of 4096
// slots and 4096 queued) had every other session's batch wait unseen again,
// no notice and no busy, until a slot freed. Past MaxQueued such a batch is
// now refused as one with a reply is (counted busy; it has no one to
// answer): the batch behind it is answered busy at once, and the queued
// ones still run.
func TestAttack36bPublishedFloodPastQueue(t *testing.T) {
	_, entered, _, end, nc, inbox := queuedRig(t, 2)
	sendBatch(t, nc, "p0", "_INBOX.q.p0", "a:hold") // holds the one slot
	testkit.Recv(t, entered, 30*time.Second, "the first batch's call")
	for _, id := range []string{"p1", "p2", "p3", "p4"} { // two queued, two past the queue
		sendBatch(t, nc, id, "", id+":hold")
	}
	start := time.Now()
	sendBatch(t, nc, "r1", "_INBOX.q.r1", "r:hold")
	deadline := time.After(10 * time.Second)
	for {
		var m *nats.Msg
		select {
		case m = <-inbox:
		case <-deadline:
			t.Fatal("r1 unanswered after 10 s: it waits unseen behind the batches past the queue")
		}
		if m.Subject != "_INBOX.q.r1" {
			continue // p0's notices
		}
		e, err := bus.Decode(m)
		var be bus.Error
		if err != nil || e.Type != bus.TypeError || e.DataAs(&be) != nil || be.Code != bus.CodeBusy {
			t.Fatalf("%+v %v: want r1's busy", e, err)
		}
		break
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("busy after %v, want at once (the queue is full)", el)
	}
	end() // the slot frees: the queued batches run, nothing of them lost
	got := map[string]bool{}
	for range 2 {
		got[testkit.Recv(t, entered, 30*time.Second, "a queued batch's call")] = true
	}
	if !got["p1"] || !got["p2"] {
		t.Fatalf("ran %v after p0, want the queued p1 and p2", got)
	}
}

// TestAttack36bDrainQueuedPublished (redteam36b, on queued36): a batch
// without a reply subject that the router read and queued when its drain
// began is run by the draining router, not dropped (no one would send it
// again: under 1.25 a queued batch found the router draining and was
// answered busy, to no one), and the drain waits for it.
func TestAttack36bDrainQueuedPublished(t *testing.T) {
	d, entered, release, _, nc, inbox := queuedRig(t, 1)
	sendBatch(t, nc, "p0", "", "p0:hold") // holds the one slot
	testkit.Recv(t, entered, 30*time.Second, "p0's call")
	sendBatch(t, nc, "p1", "", "p1:hold")
	sendBatch(t, nc, "r1", "_INBOX.q.r1", "r:hold")
	for m := testkit.Recv(t, inbox, 30*time.Second, "r1's busy"); m.Subject != "_INBOX.q.r1"; m = testkit.Recv(t, inbox, 30*time.Second, "r1's busy") {
	} // r1, read after p1, past the queue: p1 is queued
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
	// Busy at once while the router reads; once it drains, no answer
	// (Enter refuses) or no responders (unsubscribed).
	for until := time.Now().Add(30 * time.Second); ; {
		_, err := nc.RequestMsg(m, 2*time.Second)
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
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
