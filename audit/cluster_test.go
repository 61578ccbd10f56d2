package audit

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestWriteExportOnCluster: records written through two nodes of the
// 3-node cluster (replicas 3) are exported once each, filtered by session
// and tool; a record written twice (a re-sent batch) is stored once.
func TestWriteExportOnCluster(t *testing.T) {
	cl := testkit.RunCluster(t)
	s := bus.NewSubjects(bus.DefaultPrefix)
	var trails []*Trail
	var js jetstream.JetStream
	for _, node := range []int{0, 2} {
		nc := testkit.ConnectURL(t, cl.URL(node))
		j := testkit.JetStream(t, nc)
		tr, err := New(t.Context(), nc, s, Config{Replicas: 3, Inputs: true, Redact: []string{"token"}})
		if err != nil {
			t.Fatal(err)
		}
		trails, js = append(trails, tr), j
	}
	for i := range 6 {
		rec := &Record{Time: time.Now(), Session: fmt.Sprintf("s%d", i%2), ReplyID: "r1", CallID: fmt.Sprintf("c%d", i), Tool: []string{"a", "b", "c"}[i%3],
			Decision: Decision{Behavior: Allow}, Outcome: Outcome{State: bus.StateSuccess}}
		if _, err := trails[i%2].Write(rec, json.RawMessage(`{"token":"secret-value"}`)); err != nil {
			t.Fatal(err)
		}
	}
	big := &Record{Session: "s9", ReplyID: "r1", CallID: "big", Tool: "a"}
	if _, err := trails[0].Write(big, json.RawMessage(`{"q":"`+strings.Repeat("x", MaxInput)+`"}`)); err != nil {
		t.Fatal(err)
	}
	if big.Input != nil || big.InputOmitted == "" || big.InputDigest == "" {
		t.Fatalf("a large input: %+v", big)
	}
	// An input held elsewhere (an ended parked record's, by digest): the caller's digest stays.
	held := &Record{Session: "s9", ReplyID: "r1", CallID: "held", Tool: "a", InputDigest: "sha256:abc", InputOmitted: "held by its digest"}
	if _, err := trails[0].Write(held, nil); err != nil {
		t.Fatal(err)
	}
	if held.Input != nil || held.InputDigest != "sha256:abc" {
		t.Fatalf("an input held elsewhere: %+v", held)
	}
	again := &Record{Session: "s0", ReplyID: "r1", CallID: "c0", Tool: "a"}
	if _, err := trails[1].Write(again, nil); err != nil {
		t.Fatal(err)
	}
	for _, tr := range trails {
		if err := tr.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	count := func(f Filter) (n int) {
		err := Export(t.Context(), js, s, f, func(raw json.RawMessage) error {
			if string(raw) == "" || !json.Valid(raw) || contains(raw, "secret-value") {
				t.Errorf("record %s", raw)
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(Filter{}); n != 8 {
		t.Fatalf("%d records, want 8", n)
	}
	if n := count(Filter{Session: "s1"}); n != 3 {
		t.Fatalf("session s1: %d", n)
	}
	if n := count(Filter{Session: "s0", Tool: "a"}); n != 1 {
		t.Fatalf("s0/a: %d", n)
	}
}

func contains(raw json.RawMessage, s string) bool { return strings.Contains(string(raw), s) }

// TestExportReadsWhatTheLeaderHolds: on the 3-node cluster (replicas 3),
// every record Stored reported is exported at once, batch after batch,
// the leader made to step down before every tenth batch from the second
// (the first in the stream's first seconds, while the member first
// preferred as leader still answers the stream's info from its own state).
// Export reads through a consumer on any replica, and a replica may not
// have applied the newest records yet (a record is acknowledged once a
// majority holds it), so Export reads on until it has the leader's last
// selected record. Before, reads right after a reply missed the newest
// records (router.TestAuditDurableOnCluster).
func TestExportReadsWhatTheLeaderHolds(t *testing.T) {
	cl := testkit.RunCluster(t)
	s := bus.NewSubjects(bus.DefaultPrefix)
	nc := testkit.ConnectURL(t, cl.URL(0))
	tr, err := New(t.Context(), nc, s, Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	reader := testkit.ConnectURL(t, cl.URL(1))
	js := testkit.JetStream(t, reader)
	const rounds, perRound = 30, 16
	for r := range rounds {
		if r%10 == 1 {
			if err := reader.Publish("$JS.API.STREAM.LEADER.STEPDOWN."+s.Stream(Stream), nil); err != nil {
				t.Fatal(err)
			}
		}
		var ps []*Pending
		for i := range perRound {
			p, err := tr.Write(record("s1", r*perRound+i), nil)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		if lost := tr.Stored(t.Context(), ps); len(lost) > 0 {
			t.Fatalf("round %d: %d records lost, the first: %v", r, len(lost), lost[0].Err())
		}
		if got, doubles := storedCounts(t, js, s); got != (r+1)*perRound || doubles != 0 {
			t.Fatalf("round %d: %d records exported right after Stored, want %d (%d doubled)", r, got, (r+1)*perRound, doubles)
		}
	}
}
