package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBoundRoom: a Bound admits a new key while the bytes read plus those
// it admitted since stay within the soft bound; it reads again when the
// bytes are BoundEvery old, or a tenth of that before a refusal; a failed
// read keeps the last; a nil Bound admits everything.
func TestBoundRoom(t *testing.T) {
	type step struct {
		after  time.Duration // the clock moves on by this first
		bucket int64         // the bucket's bytes from now on (-1: reads fail)
		n      int           // < 0: Grew(-n) instead of Room(n)
		room   bool
		reads  int // reads so far
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"under the bound", []step{{0, 0, 40, true, 1}, {0, 0, 60, true, 1}}},
		{"at the bound a new key is refused", []step{{0, 90, 10, true, 1}, {0, 90, 1, false, 1}}},
		{"what it admitted counts until the next read", []step{{0, 0, 60, true, 1}, {0, 0, 60, false, 1}}},
		{"a refusal reads again after a tenth of the interval", []step{
			{0, 100, 1, false, 1}, {10 * time.Millisecond, 50, 1, false, 1}, {100 * time.Millisecond, 50, 1, true, 2}}},
		{"growth of a held key counts", []step{{0, 0, 10, true, 1}, {0, 0, -80, true, 1}, {0, 0, 10, true, 1}, {0, 0, 1, false, 1}}},
		{"an old read is read again", []step{{0, 0, 100, true, 1}, {time.Second, 0, 100, true, 2}}},
		{"endings that freed room are seen", []step{{0, 200, 1, false, 1}, {BoundEvery, 20, 1, true, 2}}},
		{"a failed read keeps the last", []step{{0, 95, 1, true, 1}, {time.Second, -1, 10, false, 2}}},
		{"no read yet and a failed one: room", []step{{0, -1, 10, true, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1e9, 0)
			var bucket int64
			reads := 0
			b := &Bound{soft: 100, every: BoundEvery, now: func() time.Time { return now }, read: func(context.Context) (int64, error) {
				reads++
				if bucket < 0 {
					return 0, errors.New("no leader")
				}
				return bucket, nil
			}}
			for i, s := range tc.steps {
				now, bucket = now.Add(s.after), s.bucket
				if s.n < 0 { // a held key grew by -n
					b.Grew(-s.n)
					continue
				}
				if got := b.Room(t.Context(), s.n); got != s.room || reads != s.reads {
					t.Fatalf("step %d: room %v after %d reads; want %v after %d", i, got, reads, s.room, s.reads)
				}
			}
		})
	}
	var none *Bound
	if !none.Room(t.Context(), 1<<40) || NewBound(nil, 0) != nil || NewBound(nil, -1) != nil {
		t.Error("no bound refused a key")
	}
	if HardBytes(-1) != -1 || HardBytes(1<<30) != 1<<30+1<<28 || HardBytes(1<<20) != 1<<20+BoundMargin {
		t.Error("HardBytes")
	}
}

// TestAttackBoundStateScraped (session 34, ops34): whoever reaches the
// metrics port or may ask status makes a router read a bucket's bytes at
// most once a BoundEvery however often it asks; its state counts the
// refusals and the last one's time.
func TestAttackBoundStateScraped(t *testing.T) {
	now := time.Unix(1e9, 0)
	reads := 0
	b := &Bound{soft: 100, every: BoundEvery, now: func() time.Time { return now }, read: func(context.Context) (int64, error) {
		reads++
		return 95, nil
	}}
	for range 1000 {
		b.state(t.Context(), "parked")
	}
	if b.Room(t.Context(), 10) || b.Room(t.Context(), 10) || !b.Room(t.Context(), 5) {
		t.Fatal("room at 95 of 100")
	}
	now = now.Add(BoundEvery / 2)
	for range 1000 {
		b.state(t.Context(), "parked")
	}
	if st := b.state(t.Context(), "parked"); reads != 1 || st.Bytes != 100 || st.Bound != 100 || st.Refused != 2 || !st.LastRefused.Equal(time.Unix(1e9, 0)) {
		t.Fatalf("%d reads, %+v", reads, st)
	}
	now = now.Add(BoundEvery)
	if st := b.state(t.Context(), "parked"); reads != 2 || st.Bytes != 95 {
		t.Fatalf("%d reads, %+v", reads, st)
	}
}
