package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// publisherOn returns a publisher on a fresh server, a JetStream context,
// and a function that (re)creates the stream "S" on subject "s.>".
func publisherOn(t *testing.T, cfg store.PublisherConfig) (*store.Publisher, jetstream.JetStream, func()) {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	create := func() {
		if _, err := js.CreateOrUpdateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Duplicates: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := store.NewPublisher(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, js, create
}

func publishN(p *store.Publisher, n int) []*store.Pending {
	var ps []*store.Pending
	for i := range n {
		m := nats.NewMsg(fmt.Sprintf("s.%d", i))
		m.Data = []byte("x")
		ps = append(ps, p.Publish(m, fmt.Sprintf("id-%d", i)))
	}
	return ps
}

func streamMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), "S")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestPublisherStored: messages published to a stream are stored once
// each; Stored returns none lost, Settled then says so without waiting, and
// the health is noted healthy.
func TestPublisherStored(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprint("own=", own), func(t *testing.T) { testPublisherStored(t, own) })
	}
}

func testPublisherStored(t *testing.T, own bool) {
	h := &store.Health{}
	p, js, create := publisherOn(t, store.PublisherConfig{Health: h, OwnAcks: own})
	create()
	ps := publishN(p, 20)
	if lost := p.Stored(t.Context(), ps); len(lost) > 0 {
		t.Fatalf("%d lost: %v", len(lost), lost[0].Err())
	}
	if !store.Settled(t.Context(), ps) {
		t.Fatal("Settled = false after Stored")
	}
	if full, _, _ := h.Full(); full {
		t.Fatal("health full")
	}
	if got := streamMsgs(t, js); got != 20 {
		t.Fatalf("%d stored, want 20", got)
	}
}

// TestPublisherRetries: messages whose publish failed (no stream yet) are
// published again by Stored once the stream is there, and stored once.
func TestPublisherRetries(t *testing.T) {
	p, js, create := publisherOn(t, store.PublisherConfig{})
	ps := publishN(p, 10)
	for _, x := range ps {
		if x.Ack() == nil {
			continue
		}
		select {
		case <-x.Ack().Err():
		case <-x.Ack().Ok():
			t.Fatal("stored without a stream")
		case <-time.After(30 * time.Second):
			t.Fatal("no answer to a publish")
		}
	}
	create()
	storedAgain(t, p, ps)
	if got := streamMsgs(t, js); got != 10 {
		t.Fatalf("%d stored, want 10", got)
	}
}

// TestPublisherLost: a message no stream takes is reported lost with its
// error within MaxWait, not dropped silently.
func TestPublisherLost(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprint("own=", own), func(t *testing.T) { testPublisherLost(t, own) })
	}
}

func testPublisherLost(t *testing.T, own bool) {
	p, _, _ := publisherOn(t, store.PublisherConfig{MaxWait: time.Second, OwnAcks: own})
	ps := publishN(p, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lost := p.Stored(ctx, ps)
	if len(lost) != 1 || lost[0].Err() == nil || lost[0].ID() != "id-0" || string(lost[0].Data()) != "x" {
		t.Fatalf("lost %+v", lost)
	}
}

// TestPublisherSettled: Settled waits for the acknowledgements in the
// caller's context; a refusal is kept for Stored, which publishes again,
// and a wait whose context ended leaves the message to Stored.
func TestPublisherSettled(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprint("own=", own), func(t *testing.T) { testPublisherSettled(t, own) })
	}
}

func testPublisherSettled(t *testing.T, own bool) {
	p, js, create := publisherOn(t, store.PublisherConfig{OwnAcks: own})
	create()
	if ps := publishN(p, 5); !store.Settled(t.Context(), ps) {
		t.Fatal("Settled = false with the stream there")
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if ps := publishN(p, 1); !store.Settled(ended, ps) && ps[0].Err() != nil {
		t.Fatalf("a wait whose context ended set %v", ps[0].Err())
	}
	if err := js.DeleteStream(t.Context(), "S"); err != nil {
		t.Fatal(err)
	}
	ps := publishN(p, 3)
	if store.Settled(t.Context(), ps) {
		t.Fatal("Settled = true without a stream")
	}
	create()
	storedAgain(t, p, ps)
}

// storedAgain checks that Stored stores ps, each published again.
func storedAgain(t *testing.T, p *store.Publisher, ps []*store.Pending) {
	t.Helper()
	if lost := p.Stored(t.Context(), ps); len(lost) > 0 {
		t.Fatalf("%d lost: %v", len(lost), lost[0].Err())
	}
	for _, x := range ps {
		if !x.Retried() {
			t.Fatalf("%s not retried", x.ID())
		}
	}
}

// fate is what faultyStream does with one attempt of a message.
type fate int

const (
	forward   fate = iota // to the stream, its answer back
	drop                  // nowhere (a proposal a leader change dropped)
	loseAck               // to the stream, its answer lost
	inProcess             // answered "duplicate message id is in process"
)

// faultyStream stands between publishers and the stream S on server srv:
// a message published to p.<x> goes to s.<x> as fault says for its n-th
// attempt (from 1), counted per message id. It returns the attempts seen
// per id.
func faultyStream(t *testing.T, srv *server.Server, fault func(n int) fate) func() map[string]int {
	t.Helper()
	nc := testkit.Connect(t, srv)
	var mu sync.Mutex
	attempts := map[string]int{}
	_, err := nc.Subscribe("p.>", func(m *nats.Msg) {
		id := m.Header.Get(jetstream.MsgIDHeader)
		mu.Lock()
		attempts[id]++
		n := attempts[id]
		mu.Unlock()
		switch f := fault(n); f {
		case inProcess:
			_ = m.Respond([]byte(`{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}`))
		case forward, loseAck:
			// Published, not requested: the stream acknowledges a forward to
			// the publisher itself, so an attempt's acknowledgement does not
			// wait behind the stream writes of the attempts before it (under
			// load, ten of them in turn outlasted AckWait: a third attempt).
			fwd := &nats.Msg{Subject: "s." + strings.TrimPrefix(m.Subject, "p."), Header: m.Header, Data: m.Data}
			if f == forward {
				fwd.Reply = m.Reply
			}
			_ = nc.PublishMsg(fwd)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(attempts)
	}
}

// TestPublisherRetriesThroughFaults: a message whose first acknowledgement
// is lost (the stream stored it), or whose first publish was dropped and
// whose second is answered "duplicate message id is in process" (a leader
// still holding the dropped proposal's id), is published again with the
// same message id until the stream answers, and stored exactly once. Before,
// "in process" counted as a permanent error: Stored gave the message up as
// lost, and when the first publish had been dropped nothing stored it.
func TestPublisherRetriesThroughFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(n int) fate
		want  int // attempts per message
	}{
		{"ack lost", func(n int) fate { return []fate{loseAck, forward}[min(n, 2)-1] }, 2},
		{"dropped then in process", func(n int) fate { return []fate{drop, inProcess, forward}[min(n, 3)-1] }, 3},
		{"ack lost then in process", func(n int) fate { return []fate{loseAck, inProcess, forward}[min(n, 3)-1] }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testkit.RunServer(t)
			js := testkit.JetStream(t, testkit.Connect(t, srv))
			if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Duplicates: time.Minute}); err != nil {
				t.Fatal(err)
			}
			attempts := faultyStream(t, srv, tc.fault)
			const n = 10
			for _, own := range []bool{false, true} { // jetstream's futures, then the publisher's own acks
				p, err := store.NewPublisher(testkit.Connect(t, srv), store.PublisherConfig{AckWait: 200 * time.Millisecond, MaxWait: time.Minute, OwnAcks: own})
				if err != nil {
					t.Fatal(err)
				}
				var ps []*store.Pending
				for i := range n {
					m := nats.NewMsg(fmt.Sprintf("p.%d", i))
					m.Data = []byte("x")
					ps = append(ps, p.Publish(m, fmt.Sprintf("id-%d-%v", i, own)))
				}
				storedAgain(t, p, ps)
			}
			if got := streamMsgs(t, js); got != 2*n {
				t.Fatalf("%d stored, want %d", got, 2*n)
			}
			seen := attempts()
			if len(seen) != 2*n {
				t.Errorf("%d message ids reached the stream, want %d", len(seen), 2*n)
			}
			for id, k := range seen {
				if k != tc.want {
					t.Errorf("%s: %d attempts, want %d", id, k, tc.want)
				}
			}
		})
	}
}

// TestPublisherOwnAcks: with OwnAcks, a first publish is awaited on the
// publisher's own subscription (no future); one refused (no stream: no
// responders) goes to jetstream, which reports the refusal as it would
// have, and Stored then publishes it again and it is stored once. Flush
// waits for every acknowledgement.
func TestPublisherOwnAcks(t *testing.T) {
	p, js, create := publisherOn(t, store.PublisherConfig{OwnAcks: true})
	ps := publishN(p, 2)
	for _, x := range ps {
		if x.Ack() != nil || x.Err() != nil {
			t.Fatalf("%s: a future (%v) or an error (%v)", x.ID(), x.Ack(), x.Err())
		}
	}
	if store.Settled(t.Context(), ps) {
		t.Fatal("Settled = true without a stream")
	}
	for _, x := range ps {
		if !errors.Is(x.Err(), jetstream.ErrNoStreamResponse) {
			t.Fatalf("%s: %v, want jetstream's %v", x.ID(), x.Err(), jetstream.ErrNoStreamResponse)
		}
	}
	create()
	storedAgain(t, p, ps)
	ps = publishN(p, 5)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !store.Settled(t.Context(), ps) {
		t.Fatal("Settled = false after Flush")
	}
	if got := streamMsgs(t, js); got != 5 { // s.0 to s.4, each once
		t.Fatalf("%d stored, want 5", got)
	}
}

// TestPublisherConnectionClosed: messages awaited when the publisher's
// connection closes are lost at once, not published again until the
// context ends: nothing can store them any more (a router whose connection
// was cut held its drain for its landing writes' whole budget; the first
// publish through jetstream failed with an error that wraps none, so
// "connection closed" looked transient).
func TestPublisherConnectionClosed(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprint("own=", own), func(t *testing.T) {
			srv := testkit.RunServer(t)
			nc := testkit.Connect(t, srv)
			p, err := store.NewPublisher(nc, store.PublisherConfig{OwnAcks: own})
			if err != nil {
				t.Fatal(err)
			}
			ps := publishN(p, 3) // no stream: nothing acknowledges them
			nc.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			start := time.Now()
			lost := p.Stored(ctx, ps)
			if len(lost) != 3 || ctx.Err() != nil {
				t.Fatalf("lost %d of 3 after %v (context %v)", len(lost), time.Since(start), ctx.Err())
			}
			for _, x := range lost {
				if !errors.Is(x.Err(), nats.ErrConnectionClosed) {
					t.Errorf("%s lost with %v, want connection closed", x.ID(), x.Err())
				}
			}
		})
	}
}
