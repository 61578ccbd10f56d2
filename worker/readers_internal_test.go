package worker

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
)

// blocked starts readers, at most limit, whose every call waits for
// release (called by the test or at its end), and counts the calls
// started. In a synctest bubble.
func blocked(t *testing.T, limit int) (rs *readers, started *atomic.Int64, release func()) {
	started = new(atomic.Int64)
	gate := make(chan struct{})
	rs = newReaders(64, time.Minute, limit, func(*nats.Msg) {
		started.Add(1)
		<-gate
	})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { // the calls return, then the readers exit
		release()
		rs.close()
		rs.wait(context.Background())
	})
	return rs, started, release
}

// TestReadersPromoteOnlyPastALongCall: a reader serves what it takes
// itself; while it serves for less than promoteAfter the requests behind
// it wait for it, and once it has served longer, every request waiting is
// taken by a reader of its own, so n calls that never return hold up
// nothing but themselves.
func TestReadersPromoteOnlyPastALongCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs, started, release := blocked(t, 64)
		for range 5 {
			rs.ch <- &nats.Msg{}
		}
		synctest.Wait()
		if n := started.Load(); n != 1 {
			t.Fatalf("%d calls started before promoteAfter, want 1", n)
		}
		time.Sleep(promoteAfter) // the bubble's clock: the first call has run that long
		synctest.Wait()
		if n := started.Load(); n != 5 {
			t.Fatalf("%d calls started after promoteAfter, want all 5", n)
		}
		// One more reader waits on the channel: the next request starts at once.
		rs.ch <- &nats.Msg{}
		synctest.Wait()
		if n := started.Load(); n != 6 {
			t.Fatalf("%d calls started, want 6", n)
		}
		release()
		synctest.Wait()
		if n := rs.followers.Load() + rs.parked.Load(); n != 6 {
			t.Fatalf("%d readers wait, want the 6", n)
		}
		// Idle followers exit; the leader stays.
		time.Sleep(time.Minute)
		synctest.Wait()
		if f, p := rs.followers.Load(), rs.parked.Load(); f != 0 || p != 1 {
			t.Fatalf("after a minute idle: %d followers, %d waiting on the channel; want 0 and 1", f, p)
		}
	})
}

// TestReadersShareAStreak: requests that arrive while a reader serves are
// served by the same reader once it is done (their results then share a
// write), not handed to others, as long as it serves for less than
// promoteAfter.
func TestReadersShareAStreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var cur, most int
		hold := make(chan struct{})
		first := true
		rs := newReaders(64, time.Minute, 64, func(*nats.Msg) {
			mu.Lock()
			cur++
			most = max(most, cur)
			wait := first
			first = false
			mu.Unlock()
			if wait {
				<-hold
			}
			mu.Lock()
			cur--
			mu.Unlock()
		})
		defer rs.wait(t.Context())
		defer rs.close()
		rs.ch <- &nats.Msg{}
		synctest.Wait()
		for range 20 {
			rs.ch <- &nats.Msg{}
		}
		close(hold) // before promoteAfter: no time has passed in the bubble
		synctest.Wait()
		if most != 1 || len(rs.ch) != 0 {
			t.Fatalf("%d calls at once (%d left), want one reader serving all 21", most, len(rs.ch))
		}
	})
}

// TestReadersCloseServesWhatIsLeft: closing the readers serves what the
// channel holds, then every reader exits.
func TestReadersCloseServesWhatIsLeft(t *testing.T) {
	var served atomic.Int64
	rs := newReaders(64, time.Minute, 64, func(*nats.Msg) { served.Add(1) })
	for range 50 {
		rs.ch <- &nats.Msg{}
	}
	rs.close()
	rs.wait(t.Context())
	if n := served.Load(); n != 50 {
		t.Fatalf("served %d of 50", n)
	}
}

// TestReadersBounded: past the readers' limit no reader is started: with
// every reader in a call that has not returned, the requests wait in the
// channel, and are served once a call returns.
func TestReadersBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs, started, release := blocked(t, 3)
		for range 10 {
			rs.ch <- &nats.Msg{}
		}
		for range 3 {
			time.Sleep(promoteAfter)
			synctest.Wait()
		}
		if n, all := started.Load(), rs.all.Load(); n != 3 || all != 3 {
			t.Fatalf("%d calls started by %d readers, want 3 and 3", n, all)
		}
		release()
		synctest.Wait()
		if n := started.Load(); n != 10 {
			t.Fatalf("%d calls served, want 10", n)
		}
	})
}

// TestReadersNeverAllFollow: bursts of requests, each burst served before
// the next, by readers that serve quickly but for one call in 13 (so
// that there are several readers); every burst must be served
// while the readers idle for a minute at most, i.e. some reader always
// comes back to wait on the channel. Before the readers took the place on
// the channel by CompareAndSwap, two readers ending a burst together could
// each count the other's passing increment as a reader waiting, both
// follow, and leave the next burst unread (the cross-process bench saw
// read-only calls ended by the watchdog after three heartbeats).
func TestReadersNeverAllFollow(t *testing.T) {
	var served atomic.Int64
	rs := newReaders(1024, time.Minute, 8, func(*nats.Msg) {
		if served.Add(1)%13 == 0 {
			time.Sleep(2 * promoteAfter) // a longer call now and then: more readers
		}
	})
	defer func() { rs.close(); rs.wait(context.Background()) }()
	m := &nats.Msg{}
	want := int64(0)
	for round := range 20000 {
		n := 1 + round%7
		for range n {
			rs.ch <- m
		}
		want += int64(n)
		deadline := time.Now().Add(10 * time.Second)
		for served.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d requests served after 10 s: no reader waits on the channel", round, served.Load(), want)
			}
			runtime.Gosched()
		}
	}
}
