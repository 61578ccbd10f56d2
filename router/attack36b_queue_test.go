package router_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
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
	m := batchMsg(t, "r", `{}`)
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

// TestAttack36bQueuedBytesBounded (redteam36b, on queued36's fix): batches
// without a reply subject wait for a slot with no deadline, so while the
// slots stay taken, MaxQueued (4096) of them at max_payload (1 MiB, 8 MiB
// embedded) held 4-32 GiB of the router's memory, published once each;
// under 1.25 they waited on the subscription, within its pending limit of
// 256 MiB. The waiting messages' bytes are bounded as that limit (here
// lowered to 100 KiB): past it a batch without a reply is dropped, though
// MaxQueued has room, and the ones queued before it run.
func TestAttack36bQueuedBytesBounded(t *testing.T) {
	router.SetMaxQueuedBytes(t, 100<<10)
	_, entered, _, end, nc, inbox := queuedRig(t, 8)
	sendBatch(t, nc, "p0", "_INBOX.q.p0", "p0:hold") // holds the one slot
	testkit.Recv(t, entered, 30*time.Second, "p0's call")
	pad := `{"pad":"` + strings.Repeat("x", 40<<10) + `"}`
	for _, id := range []string{"p1", "p2", "p3"} { // 40 KiB each: the third is past 100 KiB
		if err := nc.PublishMsg(batchMsg(t, id, pad)); err != nil {
			t.Fatal(err)
		}
	}
	sendBatch(t, nc, "r1", "_INBOX.q.r1", "r1:hold")
	for m := testkit.Recv(t, inbox, 30*time.Second, "r1's answer"); m.Subject != "_INBOX.q.r1"; m = testkit.Recv(t, inbox, 30*time.Second, "r1's answer") {
	} // r1, small, queued behind p1 and p2 (or p3), answered busy at 2 s
	end() // the slot frees: what was queued runs before z, in no set order (each waits on a goroutine of its own)
	sendBatch(t, nc, "z", "_INBOX.q.z", "z:hold")
	var ran []string
	for id := ""; id != "z"; {
		id = testkit.Recv(t, entered, 30*time.Second, "the queued batches' calls and z's")
		ran = append(ran, id)
	}
	slices.Sort(ran[:len(ran)-1])
	if !slices.Equal(ran, []string{"p1", "p2", "z"}) {
		t.Fatalf("ran %v after p0, want p1, p2 and z (p3 dropped past the queue's bytes)", ran)
	}
}

// batchMsg is a batch of session s1 of one call id of hold with input,
// the call's id as its reply id.
func batchMsg(t *testing.T, id, input string) *nats.Msg {
	t.Helper()
	e, err := bus.NewEvent(bus.TypeCallBatch, "test/agent", bus.Batch{Calls: []bus.Call{{ID: id, Name: "hold", Input: json.RawMessage(input)}}})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID = id, "s1"
	m, err := e.Msg(bus.NewSubjects("").Call("s1"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
