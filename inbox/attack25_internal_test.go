package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackStaleRevisionResurrects (session 25, red team; the inbox's
// records on store.Cache): once the watch has delivered the end of a call
// (its record answered, or deleted), no older revision of its record, read
// from the real bucket and replayed as a watch delivery or as the answer of
// a read that was in flight, shows it waiting again; nor does a read that
// finds no record followed by such a stale read. Only a newer revision (the
// call parked again) does.
func TestAttackStaleRevisionResurrects(t *testing.T) {
	ctx := t.Context()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	subj := bus.NewSubjects("")
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subj.Bucket(bus.BucketParked), History: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subj.Bucket(bus.BucketTools)}); err != nil {
		t.Fatal(err)
	}
	s, err := New(nc, Config{Token: "0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, s.Stop)

	const key = "s1.r1.c1"
	t0 := time.Now().UTC()
	write := func(status bus.ParkStatus) uint64 {
		t.Helper()
		rev, err := kv.Put(ctx, key, parked(t, "c1", bus.KindConfirm, status, t0, 0).val)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	held := func(want uint64) { // want 0: not held
		t.Helper()
		testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
			it, ok := s.lookup(key)
			if got := map[bool]uint64{true: it.Revision}[ok]; got != want {
				return fmt.Errorf("holds revision %d, want %d", got, want)
			}
			return nil
		})
	}
	stale := func(rev uint64) jetstream.KeyValueEntry {
		t.Helper()
		e, err := kv.GetRevision(ctx, key, rev)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// replay delivers old as the watch would, then as a read in flight
	// would answer, after a read that found nothing; the call stays ended.
	replay := func(old jetstream.KeyValueEntry) {
		t.Helper()
		s.apply(old)
		var r bus.ParkRecord
		if err := json.Unmarshal(old.Value(), &r); err != nil {
			t.Fatal(err)
		}
		it, waits := s.item(key, old.Revision(), r)
		reads := []reading{{}, {it: it, waits: waits, rev: old.Revision()}}
		s.fetch = func(context.Context, string) (reading, error) {
			r := reads[0]
			reads = reads[1:]
			return r, nil
		}
		for range 2 {
			if err := s.refresh(context.Background(), key); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok := s.lookup(key); ok {
			t.Fatalf("revision %d of an ended call shows it waiting again", old.Revision())
		}
	}

	parkedRev := write(bus.ParkParked)
	held(parkedRev)
	write(bus.ParkDone) // answered
	held(0)
	replay(stale(parkedRev))

	again := write(bus.ParkParked) // parked anew: a newer revision shows
	held(again)
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	held(0)
	replay(stale(again))
	replay(stale(parkedRev))
}
