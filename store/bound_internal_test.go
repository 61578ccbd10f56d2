package store

import (
	"context"
	"errors"
	"sync/atomic"
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
		{"a refusal reads again after a tenth of the interval, for the next caller", []step{{0, 100, 1, true, 1},
			{0, 100, 1, false, 1}, {10 * time.Millisecond, 50, 1, false, 1}, {100 * time.Millisecond, 50, 1, false, 2}, {0, 50, 1, true, 2}}},
		{"growth of a held key counts", []step{{0, 0, 10, true, 1}, {0, 0, -80, true, 1}, {0, 0, 10, true, 1}, {0, 0, 1, false, 1}}},
		{"an old read is read again", []step{{0, 0, 100, true, 1}, {time.Second, 0, 100, false, 2}, {0, 0, 100, true, 2}}},
		{"endings that freed room are seen", []step{{0, 200, 1, true, 1}, {0, 200, 1, false, 1}, {BoundEvery, 20, 1, false, 2}, {0, 20, 1, true, 2}}},
		{"a failed read keeps the last", []step{{0, 95, 1, true, 1}, {time.Second, -1, 10, false, 2}, {0, -1, 4, true, 2}}},
		{"no read yet and a failed one: room", []step{{0, -1, 10, true, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1e9, 0)
			var bucket, reads atomic.Int64
			b := &Bound{soft: 100, every: BoundEvery, now: func() time.Time { return now }, refusals: &Refusals{}, read: func(context.Context) (int64, error) {
				reads.Add(1)
				if n := bucket.Load(); n >= 0 {
					return n, nil
				}
				return 0, errors.New("no leader")
			}}
			for i, s := range tc.steps {
				now = now.Add(s.after)
				bucket.Store(s.bucket)
				if s.n < 0 { // a held key grew by -n
					b.Grew(-s.n)
					continue
				}
				got := b.Room(t.Context(), s.n)
				read(t, b)
				if got != s.room || int(reads.Load()) != s.reads {
					t.Fatalf("step %d: room %v after %d reads; want %v after %d", i, got, reads.Load(), s.room, s.reads)
				}
			}
		})
	}
	var none *Bound
	if !none.Room(t.Context(), 1<<40) || NewBound(t.Context(), nil, 0) != nil || NewBound(t.Context(), nil, -1) != nil {
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
	b := &Bound{soft: 100, every: BoundEvery, now: func() time.Time { return now }, refusals: &Refusals{}, read: func(context.Context) (int64, error) {
		reads++
		return 95, nil
	}}
	for range 1000 {
		b.state(t.Context(), "parked")
	}
	read(t, b)
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
	b.state(t.Context(), "parked") // starts a read, for the next to ask
	read(t, b)
	if st := b.state(t.Context(), "parked"); reads != 2 || st.Bytes != 95 {
		t.Fatalf("%d reads, %+v", reads, st)
	}
}

// read waits for b's read under way, if any, to land (bounded polling).
func read(t *testing.T, b *Bound) {
	t.Helper()
	for range 10000 {
		b.mu.Lock()
		reading := b.reading
		b.mu.Unlock()
		if !reading {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the bound's read did not land in 10 s")
}

// TestBoundRoomNeverWaits (queued36): a call that finds the bytes old
// starts a read and judges by what was read before; while a slow read is
// under way (a JetStream round trip, a leader lost) no call waits for it
// and no second read starts; what was admitted meanwhile still counts
// once it lands.
func TestBoundRoomNeverWaits(t *testing.T) {
	now := time.Unix(1e9, 0)
	slow, reads := make(chan int64), 0
	b := &Bound{soft: 100, every: BoundEvery, now: func() time.Time { return now }, refusals: &Refusals{}, read: func(ctx context.Context) (int64, error) {
		reads++ // under no lock: one read at a time
		select {
		case n := <-slow:
			return n, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}}
	for i := range 50 { // the first starts the read; none waits for it
		if !b.Room(t.Context(), 1) {
			t.Fatalf("call %d refused: no read has landed", i)
		}
	}
	now = now.Add(2 * BoundEvery)
	if !b.Room(t.Context(), 1) || b.state(t.Context(), "parked").Bytes != 51 {
		t.Fatal("a second read, or a call refused")
	}
	slow <- 40 // the bucket held 40 bytes; the 51 admitted since count on top
	read(t, b)
	if reads != 1 || b.Room(t.Context(), 10) || !b.Room(t.Context(), 9) {
		t.Fatalf("%d reads, want 1; room for 9 of 100 after 91", reads)
	}
}
