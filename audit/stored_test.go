package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

func record(session string, i int) *Record {
	return &Record{Time: time.Now(), Session: session, ReplyID: fmt.Sprintf("r%d", i/4), CallID: fmt.Sprintf("c%d", i%4), Tool: "t",
		Decision: Decision{Behavior: Allow}, Outcome: Outcome{State: bus.StateSuccess}}
}

// storedCounts returns how many records the stream holds and how many of
// them share a call key with another (doubles).
func storedCounts(t *testing.T, js jetstream.JetStream, s bus.Subjects) (n, doubles int) {
	t.Helper()
	// A read refused or timed out while the stream still elects a leader
	// (the test's last step-down may be recent) is read again: the writes
	// are all over, Stored returned for each.
	testkit.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
		seen := map[string]bool{}
		n, doubles = 0, 0
		return Export(t.Context(), js, s, Filter{}, func(raw json.RawMessage) error {
			var rec Record
			if err := json.Unmarshal(raw, &rec); err != nil {
				return err
			}
			k := bus.CallKey(rec.Session, rec.ReplyID, rec.CallID)
			if seen[k] {
				doubles++
			}
			seen[k] = true
			n++
			return nil
		})
	})
	return n, doubles
}

// TestStoredThroughLeaderChanges: on the 3-node cluster (replicas 3),
// records written while P_AUDIT's leader is made to step down again and
// again are all stored once Stored returns — none lost, none doubled —
// and Stored reports none lost.
func TestStoredThroughLeaderChanges(t *testing.T) {
	cl := testkit.RunCluster(t)
	s := bus.NewSubjects(bus.DefaultPrefix)
	nc := testkit.ConnectURL(t, cl.URL(0))
	js := testkit.JetStream(t, nc)
	tr, err := New(t.Context(), nc, s, Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	admin := testkit.ConnectURL(t, cl.URL(1))
	const n, perBatch = 400, 40
	stepdowns, retried := 0, 0
	var ps []*Pending
	for i := range n {
		if i%perBatch == perBatch/4 && i/perBatch%2 == 1 {
			// Every other batch is written while the stream elects a
			// new leader: the old one steps down a quarter into it, and
			// the writes go on without waiting for the election.
			if err := admin.Publish("$JS.API.STREAM.LEADER.STEPDOWN."+s.Stream(Stream), nil); err != nil {
				t.Fatal(err)
			}
			stepdowns++
		}
		p, err := tr.Write(record("s1", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
		if i%perBatch == perBatch-1 {
			// A batch's worth: wait for these before writing more, as the
			// router waits before each reply.
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			lost := tr.Stored(ctx, ps)
			cancel()
			if len(lost) > 0 {
				t.Fatalf("%d records lost, the first: %v", len(lost), lost[0].Err())
			}
			for _, p := range ps {
				if p.Retried() {
					retried++
				}
			}
			ps = nil
		}
	}
	got, doubles := storedCounts(t, js, s)
	if got != n || doubles != 0 {
		t.Fatalf("%d records stored of %d, %d doubled (%d leader changes)", got, n, doubles, stepdowns)
	}
	t.Logf("%d records, %d leader changes, %d publishes retried: none lost, none doubled", n, stepdowns, retried)
}

// trailWithoutStream is a trail on one server whose stream was deleted
// after the trail made it.
func trailWithoutStream(t *testing.T) (*Trail, *nats.Conn, jetstream.JetStream, bus.Subjects) {
	t.Helper()
	srv := testkit.RunServer(t)
	s := bus.NewSubjects(bus.DefaultPrefix)
	nc := testkit.Connect(t, srv)
	js := testkit.JetStream(t, nc)
	tr, err := New(t.Context(), nc, s, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(t.Context(), s.Stream(Stream)); err != nil {
		t.Fatal(err)
	}
	return tr, nc, js, s
}

// TestStoredRetriesFailedPublishes: records whose publish failed (no
// stream answered: here it is gone for a moment) are published again by
// Stored and stored once each.
func TestStoredRetriesFailedPublishes(t *testing.T) {
	tr, nc, js, s := trailWithoutStream(t)
	const n = 50
	var ps []*Pending
	for i := range n {
		p, err := tr.Write(record("s1", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	// Every publish has failed (no responders) before the stream is back.
	for _, p := range ps {
		select {
		case <-p.Ack().Err():
		case <-p.Ack().Ok():
			t.Fatal("a record stored without its stream")
		case <-time.After(30 * time.Second):
			t.Fatal("no answer to a publish")
		}
	}
	if _, err := New(t.Context(), nc, s, Config{}); err != nil {
		t.Fatal(err)
	}
	if lost := tr.Stored(t.Context(), ps); len(lost) > 0 {
		t.Fatalf("%d lost: %v", len(lost), lost[0].Err())
	}
	if got, doubles := storedCounts(t, js, s); got != n || doubles != 0 {
		t.Fatalf("%d stored of %d, %d doubled", got, n, doubles)
	}
}

// TestStoredReportsLost: a record the stream cannot take (its subject is
// outside the stream: here, a record published once the stream is gone)
// is reported lost with its error, not dropped silently, and Stored
// returns within its context.
func TestStoredReportsLost(t *testing.T) {
	tr, _, _, _ := trailWithoutStream(t)
	p, err := tr.Write(record("s1", 0), json.RawMessage(`{"q":1}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	lost := tr.Stored(ctx, []*Pending{p})
	if len(lost) != 1 || lost[0].Err() == nil || lost[0].ID() != bus.CallKey("s1", "r0", "c0") || !json.Valid(lost[0].Data()) {
		t.Fatalf("lost %+v", lost)
	}
}
