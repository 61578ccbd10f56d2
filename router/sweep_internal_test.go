package router

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestSweeperEndsKidsAtTheirDeadlines: the root's sweeper ends its kids
// at their own deadlines, in any order of start, and none before; a kid
// that ends first leaves the root's kids at once; the timer is armed for
// the earliest live kid (a fire that finds its kid gone arms it for the
// next); the root's end ends them all. The sweeps are run by hand
// at chosen instants, the timer's own fire under synctest's clock.
func TestSweeperEndsKidsAtTheirDeadlines(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Hour) }
	cases := []struct {
		name     string
		ends     []int // each kid's deadline, hours after t0
		stop     []int // kids stopped before the sweep
		sweepAt  int   // hours after t0
		expired  []int // the kids the sweep ends
		armedFor int   // the earliest live kid's deadline, hours; 0: not armed
	}{
		{name: "none due", ends: []int{3, 1, 2}, sweepAt: 0, armedFor: 1},
		{name: "the earliest, started second", ends: []int{3, 1, 2}, sweepAt: 1, expired: []int{1}, armedFor: 2},
		{name: "all but the last, out of order", ends: []int{3, 1, 2, 4}, sweepAt: 3, expired: []int{0, 1, 2}, armedFor: 4},
		{name: "a stopped kid is not ended again", ends: []int{1, 2}, stop: []int{0}, sweepAt: 2, expired: []int{1}},
		{name: "the head stopped: the fire arms the next", ends: []int{1, 5}, stop: []int{0}, sweepAt: 1, armedFor: 5},
		{name: "equal deadlines", ends: []int{2, 2, 2}, sweepAt: 2, expired: []int{0, 1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := newCallContexts(context.Background())
			defer root.stop()
			kids := make([]*callCtx, len(tc.ends))
			for i, h := range tc.ends {
				kids[i] = new(callCtx)
				kids[i].start(root, at(h))
			}
			for _, i := range tc.stop {
				kids[i].stop()
			}
			if n := kidsOf(root); n != len(tc.ends)-len(tc.stop) {
				t.Fatalf("%d kids listed, want %d (the live ones)", n, len(tc.ends)-len(tc.stop))
			}
			root.sw.sweep(root, at(tc.sweepAt))
			stopped := map[int]bool{}
			for _, i := range tc.stop {
				stopped[i] = true
			}
			expired := map[int]bool{}
			for _, i := range tc.expired {
				expired[i] = true
			}
			for i, k := range kids {
				want := error(nil)
				switch {
				case stopped[i]:
					want = context.Canceled
				case expired[i]:
					want = context.DeadlineExceeded
				}
				if k.Err() != want {
					t.Errorf("kid %d (deadline %dh): err %v, want %v", i, tc.ends[i], k.Err(), want)
				}
			}
			root.mu.Lock()
			armed := root.sw.at
			root.mu.Unlock()
			if n, want := kidsOf(root), len(tc.ends)-len(tc.stop)-len(tc.expired); n != want {
				t.Errorf("%d kids left, want %d", n, want)
			}
			if (tc.armedFor == 0) != armed.IsZero() || tc.armedFor != 0 && !armed.Equal(at(tc.armedFor)) {
				t.Errorf("armed for %v, want %dh after the start", armed.Sub(t0), tc.armedFor)
			}
			root.stop()
			root.mu.Lock()
			defer root.mu.Unlock()
			if root.kids != nil {
				t.Fatal("the root's end left kids listed")
			}
			for i, k := range kids {
				if k.Err() == nil {
					t.Fatalf("kid %d live after the root's end", i)
				}
			}
		})
	}
}

// TestSweeperTimer: on the clock, each kid ends at its own deadline, not
// a moment before, and so does a kid's kid (a write call's attempt); one
// added with an earlier deadline than the armed one re-arms the timer
// earlier; the timer's fire for a kid that ended first ends nobody and
// arms it for the next.
func TestSweeperTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := newCallContexts(context.Background())
		defer root.stop()
		start := time.Now()
		var late, gone, early, call, attempt callCtx
		late.start(root, start.Add(3*time.Second))
		gone.start(root, start.Add(time.Second))
		early.start(root, start.Add(2*time.Second))
		call.start(root, time.Time{}) // a write call: its attempt has the deadline
		attempt.start(&call, start.Add(1500*time.Millisecond))
		gone.stop()
		time.Sleep(time.Second) // gone's deadline: its fire ends nobody
		synctest.Wait()
		if late.Err() != nil || early.Err() != nil || attempt.Err() != nil {
			t.Fatal("a kid ended at another's deadline")
		}
		time.Sleep(500 * time.Millisecond) // a kid's kid is swept too
		synctest.Wait()
		if attempt.Err() != context.DeadlineExceeded || call.Err() != nil || early.Err() != nil {
			t.Fatalf("at 1.5s: attempt %v, its call %v, early %v", attempt.Err(), call.Err(), early.Err())
		}
		call.stop()
		time.Sleep(500*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if early.Err() != nil {
			t.Fatal("ended before its deadline")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if early.Err() != context.DeadlineExceeded || late.Err() != nil {
			t.Fatalf("at 2s: early %v, late %v", early.Err(), late.Err())
		}
		var sooner callCtx // armed for late's 3s: re-armed for 2.5s
		sooner.start(root, start.Add(2500*time.Millisecond))
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if sooner.Err() != context.DeadlineExceeded || late.Err() != nil {
			t.Fatalf("at 2.5s: sooner %v, late %v", sooner.Err(), late.Err())
		}
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if late.Err() != context.DeadlineExceeded {
			t.Fatalf("at 3s: late %v", late.Err())
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}

// kidsOf counts root's kids.
func kidsOf(root *callCtx) int {
	root.mu.Lock()
	defer root.mu.Unlock()
	n := 0
	for k := root.kids; k != nil; k = k.next {
		n++
	}
	return n
}
