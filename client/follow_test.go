package client_test

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestFollowerSilence: against a scripted router of 1.9 ("heartbeat":
// true), the follower asks every pull with heartbeat_ms on a reply subject
// of its own; a pull that brings nothing within two heartbeats is sent
// again on the same consumer, an earlier pull's status does not end the
// current one, and after three silent pulls in a row the follower stops the
// consumer and asks for another from the sequence after the last it got
// (docs/protocol.md 3.4, 1.9).
func TestFollowerSilence(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	var (
		mu      sync.Mutex
		asked   []uint64                // start_seq of each consumer asked for
		pulls   = map[string][]string{} // consumer -> reply subjects of its pulls
		beats   []int64
		stopped []string
	)
	stored := func(reply string, seq int) { // as a router relays a handoff request: Nats-Sequence names the sequence
		e, _ := bus.NewEvent(bus.TypeBatchDone, "test/router", bus.BatchDone{})
		e.SessionID = "s1"
		if err := bus.Publish(withSeq{nc, strconv.Itoa(seq)}, reply, e); err != nil {
			t.Error(err)
		}
	}
	status := func(reply, code string) {
		_ = nc.PublishMsg(&nats.Msg{Subject: reply, Header: nats.Header{"Status": {code}}})
	}
	sub, err := nc.Subscribe("toolbus.replay.s1", func(m *nats.Msg) {
		e, err := bus.Decode(m)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch e.Type {
		case bus.TypeReplay:
			var q bus.Replay
			_ = e.DataAs(&q)
			asked = append(asked, q.StartSeq)
			name := []string{"replay-a", "replay-b"}[min(len(asked)-1, 1)]
			_ = bus.Respond(nc, m, "test/router", bus.TypeReplayReady, bus.ReplayReady{Stream: "S", Consumer: name, Idle: "30s", Heartbeat: true})
		case bus.TypeConsumerNext:
			var q bus.ConsumerNext
			_ = e.DataAs(&q)
			beats = append(beats, q.HeartbeatMS)
			pulls[q.Consumer] = append(pulls[q.Consumer], m.Reply)
			switch n := len(pulls[q.Consumer]); {
			case q.Consumer == "replay-a" && n == 1:
				stored(m.Reply, 7)
				status(m.Reply, "408")
			case q.Consumer == "replay-a" && n == 2:
				status(pulls["replay-a"][0], "409") // the first pull's, long over: ignored
			case q.Consumer == "replay-a": // silent
			case q.Consumer == "replay-b" && n == 1:
				stored(m.Reply, 9)
			}
		case bus.TypeConsumerStop:
			var q bus.ConsumerStop
			_ = e.DataAs(&q)
			stopped = append(stopped, q.Consumer)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	c := client.New(nc, client.Config{Source: "test/agent"})
	start := time.Now()
	ev, err := c.Replay(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		select {
		case <-ev.C:
		case <-time.After(30 * time.Second):
			t.Fatalf("event %d did not come", i+1)
		}
	}
	took := time.Since(start)
	if err := ev.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Three silent pulls of 2 s each (the second's 2 s counted from the
	// stale status): about 6 s, well under the 15 s of 1.8.
	if took < 5*time.Second || took > 12*time.Second {
		t.Errorf("the second consumer's event after %v, want about 6 s", took)
	}
	if len(asked) != 2 || asked[0] != 0 || asked[1] != 8 {
		t.Errorf("consumers asked from %v, want [0 8]", asked)
	}
	if a := pulls["replay-a"]; len(a) != 4 {
		t.Errorf("%d pulls on replay-a, want 4 (one answered, three silent)", len(a))
	}
	for name, replies := range pulls { // one reply subject a pull, under one inbox a consumer
		inbox := replies[0][:strings.LastIndexByte(replies[0], '.')+1]
		for i, r := range replies {
			if !strings.HasPrefix(r, inbox) || slices.Index(replies, r) != i {
				t.Errorf("%s's pulls replied to %v", name, replies)
			}
		}
	}
	if a, b := pulls["replay-a"], pulls["replay-b"]; len(a) > 0 && len(b) > 0 &&
		a[0][:strings.LastIndexByte(a[0], '.')] == b[0][:strings.LastIndexByte(b[0], '.')] {
		t.Errorf("replay-b's pulls share replay-a's inbox: %v %v", a, b)
	}
	for _, b := range beats {
		if b != 1000 {
			t.Errorf("heartbeat_ms %v, want 1000 on every pull", beats)
			break
		}
	}
	if len(stopped) < 1 || stopped[0] != "replay-a" {
		t.Errorf("stopped %v, want replay-a first (silent), then replay-b at the end", stopped)
	}
}

// withSeq publishes with a header Nats-Sequence.
type withSeq struct {
	nc  *nats.Conn
	seq string
}

func (p withSeq) PublishMsg(m *nats.Msg) error {
	m.Header.Set("Nats-Sequence", p.seq)
	return p.nc.PublishMsg(m)
}
