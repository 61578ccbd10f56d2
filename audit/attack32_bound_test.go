package audit

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestAttackFloodFillsTrail (session 32, red team): the trail is bounded
// by default (DefaultMaxBytes), and a flood of records that reaches its
// bound never pushes an older record out: past it each new record is
// reported lost, as full, at once (Stored retries no full store), while
// every record stored before stays. A trail made by an older router
// (oldest dropped first, no bound) already holding more than the bound
// keeps all its records when the bound comes.
func TestAttackFloodFillsTrail(t *testing.T) {
	srv := testkit.RunServer(t)
	s := bus.NewSubjects(bus.DefaultPrefix)
	nc := testkit.Connect(t, srv)
	js := testkit.JetStream(t, nc)
	if _, err := New(t.Context(), nc, s, Config{}); err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(t.Context(), s.Stream(Stream))
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.MaxBytes != DefaultMaxBytes || c.Discard != jetstream.DiscardNew {
		t.Fatalf("the default trail: max bytes %d, discard %v", c.MaxBytes, c.Discard)
	}

	// An older router's trail, unbounded, dropping the oldest: 40 records.
	_, err = js.UpdateStream(t.Context(), jetstream.StreamConfig{Name: s.Stream(Stream), Subjects: []string{s.All(kind)},
		MaxAge: DefaultMaxAge, MaxBytes: -1, Discard: jetstream.DiscardOld, Duplicates: dedupeWindow})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := New(t.Context(), nc, s, Config{MaxBytes: -1})
	write := func(tr *Trail, from, n int) (lost []*Pending) {
		t.Helper()
		var ps []*Pending
		for i := from; i < from+n; i++ {
			p, err := tr.Write(record("s1", i), nil)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		return tr.Stored(t.Context(), ps)
	}
	if lost := write(old, 0, 40); len(lost) > 0 {
		t.Fatalf("%d lost: %v", len(lost), lost[0].Err())
	}
	stored, err := js.Stream(t.Context(), s.Stream(Stream))
	if err != nil {
		t.Fatal(err)
	}
	bound := int64(stored.CachedInfo().State.Bytes) / 2

	tr, err := New(t.Context(), nc, s, Config{MaxBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	if n, doubles := storedCounts(t, js, s); n != 40 || doubles != 0 {
		t.Fatalf("the bound (%d bytes) came over 40 stored records: %d kept, %d doubled", bound, n, doubles)
	}
	ctx, cancel := context.WithTimeout(t.Context(), DefaultMaxWait/2) // no retries through a full store
	defer cancel()
	var ps []*Pending
	for i := 40; i < 140; i++ {
		p, err := tr.Write(record("s1", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	lost := tr.Stored(ctx, ps)
	if ctx.Err() != nil || len(lost) != len(ps) {
		t.Fatalf("a full trail: %d of %d new records reported lost (ctx %v)", len(lost), len(ps), ctx.Err())
	}
	for _, p := range lost {
		if !store.IsFull(p.Err()) {
			t.Fatalf("lost %s: %v, not as full", p.ID(), p.Err())
		}
	}
	if n, _ := storedCounts(t, js, s); n != 40 {
		t.Fatalf("after the flood the trail holds %d records, not the 40 before it", n)
	}
}
