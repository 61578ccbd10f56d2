package offload_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack42bStalledPutHoldsTheWindow: a put whose acknowledgements never
// come (a store that takes its chunks and never answers: a hostile store,
// or an ack lost in a leader change) holds the connection's whole window
// (PutWindow, shared by its puts since 1.32). Before the fix it held it for
// its 2-minute bound (PutTimeout), so every other call's output on the
// worker waited as long; now a chunk's acknowledgement is awaited AckWait,
// the stalled put fails and gives its room back, and the next put goes on.
func TestAttack42bStalledPutHoldsTheWindow(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	storeConn := testkit.Connect(t, s)
	const bucket = "stall_outputs"
	var mu sync.Mutex
	stalled, seq := "", 0
	// The store: acknowledges every publish but those of the first object's chunks.
	if _, err := storeConn.Subscribe("$O."+bucket+".>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if token, ok := strings.CutPrefix(m.Subject, "$O."+bucket+".C."); ok {
			if stalled == "" {
				stalled = token
			}
			if token == stalled {
				return // never acknowledged
			}
		}
		seq++
		_ = m.Respond(fmt.Appendf(nil, `{"stream":"OBJ_%s","seq":%d}`, bucket, seq))
	}); err != nil {
		t.Fatal(err)
	}
	if err := storeConn.Flush(); err != nil {
		t.Fatal(err)
	}
	o, err := offload.New(nc, bucket, offload.Limits{Inline: 1000})
	if err != nil {
		t.Fatal(err)
	}
	const ackWait = 2 * time.Second
	offload.SetAckWait(o, ackWait)
	stalledDone := make(chan error, 1)
	go func() { // more than the window: it fills it, then waits for room
		_, err := o.Fit(t.Context(), "s.r.big", bus.Text(strings.Repeat("b", offload.PutWindow+offload.ChunkSize)), 0, false)
		stalledDone <- err
	}()
	full := time.Now()
	for offload.Room(o) < offload.PutWindow/offload.ChunkSize { // bounded polling: the window fills at once
		if time.Since(full) > testkit.SetupWait {
			t.Fatalf("the stalled put holds %d chunks of the window", offload.Room(o))
		}
		time.Sleep(time.Millisecond)
	}
	small := make(chan error, 1)
	started := time.Now()
	go func() {
		_, err := o.Fit(t.Context(), "s.r.small", bus.Text(strings.Repeat("s", 4000)), 0, false)
		small <- err
	}()
	select {
	case err := <-small:
		if err != nil {
			t.Fatalf("another call's put: %v", err)
		}
		t.Logf("another call's put stored after %v beside a stalled put (AckWait %v)", time.Since(started).Round(time.Millisecond), ackWait)
	case <-time.After(4 * ackWait):
		t.Fatalf("another call's put still waits for room after %v: one stalled put holds the worker's whole window", 4*ackWait)
	}
	if err := <-stalledDone; err == nil {
		t.Error("the put whose acknowledgements never came reported success")
	}
	if n := offload.Room(o); n != 0 {
		t.Errorf("the window counts %d chunks after both puts ended", n)
	}
}
