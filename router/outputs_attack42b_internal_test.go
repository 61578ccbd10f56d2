package router

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack42bWindowWaitersHoldSlots: an output.get waits for room among
// the router's 16 MiB of windows (1.32) in one of its general slots
// (MaxInflight), which no session share bounds. With the room taken (slow
// reads, or a session reading without pause), a session's flood of
// output.get held every slot for the read's budget (30 s), and every other
// session's batches and tools queries waited as long. Now at most an eighth
// of the slots wait for room; a read past them is answered busy at once.
func TestAttack42bWindowWaitersHoldSlots(t *testing.T) {
	const slots = 16
	s := testkit.RunServer(t)
	r, err := New(testkit.Connect(t, s), Config{ID: "ra", MaxInflight: slots})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	// The room taken, as by eight slow windows in flight.
	if err := r.stored.room.Acquire(t.Context(), windowsHeld); err != nil {
		t.Fatal(err)
	}
	defer r.stored.room.Release(windowsHeld)

	nc := testkit.Connect(t, s)
	busy := make(chan struct{}, 4*slots)
	sub, err := nc.Subscribe("_INBOX.attack42b.>", func(m *nats.Msg) {
		if e, err := bus.Decode(m); err == nil && e.Type == bus.TypeError {
			busy <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range 4 * slots {
		e, err := bus.NewEvent(offload.TypeGet, "attacker", offload.Get{URL: "nats-object://toolbus_outputs/s1.r.c.0#sha256=00"})
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID = "s1"
		m, err := e.Msg(r.subj.Prefix + ".outputs.s1")
		if err != nil {
			t.Fatal(err)
		}
		m.Reply = fmt.Sprintf("_INBOX.attack42b.%d", i)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	victim := client.New(testkit.Connect(t, s), client.Config{Source: "test/victim"})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	started := time.Now()
	if _, err := victim.Tools(ctx, "s2", "", nil); err != nil {
		t.Fatalf("another session's tools query while a session's reads wait for room: %v after %v", err, time.Since(started).Round(time.Millisecond))
	}
	took := time.Since(started).Round(time.Millisecond)
	// Every read past maxWaiting is answered busy at once; those waiting stay.
	want := 4*slots - int(r.stored.maxWaiting)
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if len(busy) < want {
			return fmt.Errorf("%d reads answered busy, want %d", len(busy), want)
		}
		return nil
	})
	if n := r.stored.waiting.Load(); n != r.stored.maxWaiting {
		t.Errorf("%d reads wait for room, want %d", n, r.stored.maxWaiting)
	}
	t.Logf("another session's tools query answered in %v beside a flood of %d reads (%d busy at once, %d waiting)", took, 4*slots, want, r.stored.maxWaiting)
}
