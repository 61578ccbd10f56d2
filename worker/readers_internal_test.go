package worker

import (
	"context"
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
	}).start()
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
		}).start()
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

// TestReadersShortRunPromotesOne: a reader past promoteAfter in a run of
// short calls (not one long call) promotes one more reader to share them,
// not one per request waiting: those would mostly find the channel taken
// again and follow (session 26). Each reader so promoted may promote one
// more after its own promoteAfter, so a busy worker still takes more
// cores.
func TestReadersShortRunPromotesOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var cur, most int
		count := func(d int) {
			mu.Lock()
			defer mu.Unlock()
			cur += d
			most = max(most, cur)
		}
		rs := newReaders(64, time.Minute, 64, func(*nats.Msg) {
			count(1)
			time.Sleep(promoteAfter / 4) // a short call, on the bubble's clock
			count(-1)
		}).start()
		defer rs.wait(t.Context())
		defer rs.close()
		for range 40 {
			rs.ch <- &nats.Msg{}
		}
		time.Sleep(promoteAfter + promoteAfter/8) // past the first reader's promotion, before the second's
		synctest.Wait()
		mu.Lock()
		n := most
		mu.Unlock()
		if n != 2 {
			t.Fatalf("%d calls at once after one run of short calls past promoteAfter, want 2", n)
		}
		time.Sleep(promoteAfter)
		synctest.Wait()
		mu.Lock()
		n = most
		mu.Unlock()
		if n != 3 {
			t.Fatalf("%d calls at once after the second reader's promoteAfter, want 3", n)
		}
	})
}

// TestReadersCloseServesWhatIsLeft: closing the readers serves what the
// channel holds, then every reader exits.
func TestReadersCloseServesWhatIsLeft(t *testing.T) {
	var served atomic.Int64
	rs := newReaders(64, time.Minute, 64, func(*nats.Msg) { served.Add(1) }).start()
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

// TestReadersNeverAllFollow: the reader that held the place on the
// channel comes back from serving a request while another reader, done
// with its own streak, is still deciding to follow: one of the two must
// still wait on the channel. The second reader is held just past its
// decision (rs.decided), where a reader that counted itself in with
// Add(1) had not yet counted itself out: the first then counted that
// increment as a reader waiting and followed too, and the next request was
// never read (the cross-process bench saw read-only calls ended by the
// router's watchdog after three heartbeats).
func TestReadersNeverAllFollow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		served := make(chan string, 8)
		rs := newReaders(64, time.Hour, 8, func(m *nats.Msg) {
			if m.Subject == "long" {
				<-gate
			}
			served <- m.Subject
		})
		var holding atomic.Bool
		hold, held := make(chan struct{}), make(chan bool, 8)
		rs.decided = func(placed bool) {
			held <- placed
			if !placed && holding.CompareAndSwap(false, true) { // the first to follow: the reader of "long"
				<-hold
			}
		}
		rs.start()
		t.Cleanup(func() { rs.close(); rs.wait(context.Background()) })
		if placed := <-held; !placed { // the first reader waits on the channel
			t.Fatal("the first reader does not wait on the channel")
		}
		synctest.Wait()
		rs.ch <- &nats.Msg{Subject: "long"}
		time.Sleep(promoteAfter) // past it: another reader starts and waits on the channel
		if placed := <-held; !placed {
			t.Fatal("the reader started past promoteAfter does not wait on the channel")
		}
		synctest.Wait()
		if n := rs.parked.Load(); n != 1 {
			t.Fatalf("%d readers wait on the channel while one serves long, want 1", n)
		}
		close(gate)
		if <-served != "long" {
			t.Fatal("long not served")
		}
		if placed := <-held; placed {
			t.Fatal("the reader of long took the place another reader held")
		}
		// The first reader is held deciding; the second takes a request,
		// serves it and decides in its turn.
		rs.ch <- &nats.Msg{Subject: "short"}
		if got := <-served; got != "short" {
			t.Fatalf("served %q, want short", got)
		}
		synctest.Wait()
		close(hold)
		synctest.Wait()
		rs.ch <- &nats.Msg{Subject: "next"}
		synctest.Wait()
		select {
		case got := <-served:
			if got != "next" {
				t.Fatalf("served %q, want next", got)
			}
		default:
			t.Fatalf("a request left unread: %d readers wait on the channel, %d follow", rs.parked.Load(), rs.followers.Load())
		}
	})
}

// TestReadersWakeLastFollower: a promotion wakes the follower that followed
// last (its stack and caches the warmest); one that reached its idle time
// leaves the followers and is never woken after; a follower taken by a
// promotion just as its idle time came still leads.
func TestReadersWakeLastFollower(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := newReaders(4, time.Minute, 8, func(*nats.Msg) {})
		defer close(rs.quit)
		woke := make(chan int, 3)
		followers := make([]*reader, 3)
		for i := range followers {
			r := &reader{rs: rs, wake: make(chan struct{}, 1), idle: time.NewTimer(time.Hour)}
			r.idle.Stop()
			followers[i] = r
			go func() {
				if r.follow() {
					woke <- i
				}
			}()
			synctest.Wait() // each follows in turn: 0, then 1, then 2
		}
		for _, want := range []int{2, 1} {
			if !rs.promote() {
				t.Fatal("no follower promoted")
			}
			synctest.Wait()
			if got := <-woke; got != want {
				t.Fatalf("follower %d woken, want %d (the last to follow)", got, want)
			}
		}
		time.Sleep(time.Minute) // follower 0's idle time
		synctest.Wait()
		if rs.promote() || rs.followers.Load() != 0 {
			t.Fatalf("a follower past its idle time was promoted (%d followers)", rs.followers.Load())
		}
		select {
		case i := <-woke:
			t.Fatalf("follower %d woken after its idle time", i)
		default:
		}
		// Promoted as its timer fires: unfollow finds it gone, so it leads.
		r := followers[0]
		rs.idle = append(rs.idle, r)
		if !rs.promote() || rs.unfollow(r) {
			t.Fatal("a promoted follower was still listed")
		}
		select {
		case <-r.wake:
		default:
			t.Fatal("the promotion sent no wake")
		}
	})
}

// TestReadersLaterStreakPromotesOnItsOwnTime: a streak that begins soon
// after another is promoted promoteAfter after its own start, neither at
// the earlier streak's time nor never (a timer left armed across streaks,
// tried in session 30, must keep this).
func TestReadersLaterStreakPromotesOnItsOwnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var started atomic.Int64
		gate := make(chan struct{})
		rs := newReaders(64, time.Minute, 64, func(m *nats.Msg) {
			started.Add(1)
			if m.Subject == "long" {
				<-gate
			}
		}).start()
		defer rs.wait(t.Context())
		defer rs.close()
		defer close(gate)
		rs.ch <- &nats.Msg{Subject: "short"} // a streak of one call, at 0: arms the timer for promoteAfter
		synctest.Wait()
		time.Sleep(promoteAfter * 6 / 10)
		for _, s := range []string{"long", "next", "next"} { // a streak at 0.6 promoteAfter, the timer still pending
			rs.ch <- &nats.Msg{Subject: s}
		}
		synctest.Wait()
		time.Sleep(promoteAfter / 2) // past the first streak's time, not the second's
		synctest.Wait()
		if n := started.Load(); n != 2 {
			t.Fatalf("%d calls started at 1.1 promoteAfter, want 2 (the long one's streak is younger)", n)
		}
		time.Sleep(promoteAfter / 2) // the long call has served promoteAfter
		synctest.Wait()
		if n := started.Load(); n != 4 {
			t.Fatalf("%d calls started at 1.6 promoteAfter, want all 4", n)
		}
	})
}
