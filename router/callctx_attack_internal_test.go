package router

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAttackCallCtxTimerIntoNextCall (session 26, red team): call
// contexts whose cancels race their deadlines (and their AfterFuncs and
// attempts) by the thousand hand their pooled timers on to the next calls;
// a timer whose fire had begun must never end the call that took it over.
// Every raced context ends once, as canceled or expired, its AfterFunc
// runs once, and contexts started among them with an hour's deadline are
// all live afterwards. Run it under -race -count 20.
func TestAttackCallCtxTimerIntoNextCall(t *testing.T) {
	root := newCallContexts(context.Background())
	const workers, rounds = 8, 400
	var (
		wg      sync.WaitGroup
		ran     atomic.Int64
		longMu  sync.Mutex
		long    []*callCtx
		churned = make(chan *callCtx, 2*workers*rounds)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				c := new(callCtx)
				c.start(root, time.Now().Add(time.Duration((i*7+w)%50)*time.Microsecond))
				c.AfterFunc(func() { ran.Add(1) })
				a := new(callCtx) // an attempt under it, with a deadline of its own
				a.start(c, time.Now().Add(time.Duration(i%30)*time.Microsecond))
				if i%3 != 0 {
					c.stop() // races the timer's fire
				}
				churned <- c
				churned <- a
				if i%40 == 0 { // a call that takes a timer just released
					l := new(callCtx)
					l.start(root, time.Now().Add(time.Hour))
					longMu.Lock()
					long = append(long, l)
					longMu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(churned)
	for c := range churned {
		waitDone(t, c)
		if err := c.Err(); err != context.Canceled && err != context.DeadlineExceeded {
			t.Fatalf("ended with %v", err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ran.Load() < workers*rounds && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // bounded polling for the AfterFuncs' goroutines
	}
	if n := ran.Load(); n != workers*rounds {
		t.Fatalf("%d AfterFuncs ran, want %d", n, workers*rounds)
	}
	for _, l := range long {
		if l.Err() != nil {
			t.Fatalf("a call with an hour's deadline ended: %v (a reused timer fired into it)", l.Err())
		}
		l.stop()
	}
	root.mu.Lock()
	defer root.mu.Unlock()
	if root.kids != nil {
		t.Fatal("ended contexts still listed")
	}
}
