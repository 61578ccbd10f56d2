package replies

import (
	"container/heap"
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
)

// BenchmarkAttack36bFire (redteam36b) is one fire of the Mux's silence
// timer with n calls waiting, as the Go client makes them (6 s, 15 s, 3
// re-sends): "quiet", none of them due (the timer armed for the soonest);
// "due", every one due (each told to re-send and its next window started).
// A fire holds the Mux's lock throughout: what it costs is what a reply, a
// notice or a new call may wait behind it, at most once per slack (a
// fiftieth of the window, 120 ms at 6 s). Until fire37 a fire walked every
// wait; since, the waits are in a heap on their windows' ends and a fire
// touches the due ones only.
func BenchmarkAttack36bFire(b *testing.B) {
	rs := Resend{First: 6 * time.Second, AfterNotice: 15 * time.Second, Max: 3}
	for _, n := range []int{10_000, 100_000} {
		for _, due := range []bool{false, true} {
			b.Run(fmt.Sprintf("%d/due=%v", n, due), func(b *testing.B) {
				a := silenceMux()
				ws := make([]*Wait, n)
				for i := range ws {
					w, err := a.await(0, nil, rs)
					if err != nil {
						b.Fatal(err)
					}
					ws[i] = w
				}
				b.ResetTimer()
				for range b.N {
					if due {
						b.StopTimer()
						a.mu.Lock()
						for _, w := range ws {
							w.due, w.late, w.sent = time.Now().Add(-time.Millisecond), time.Now(), 0
							select {
							case <-w.poke:
							default:
							}
						}
						heap.Init(&a.n.q)
						a.mu.Unlock()
						b.StartTimer()
					}
					a.n.fire()
				}
				b.StopTimer()
				a.n.timer.Stop()
			})
		}
	}
}

// TestAttack36bPooledWaitNoStalePoke (redteam36b, on client36's one timer):
// a wait told to re-send whose reply came before it read the poke goes back
// to the pool with the poke still in its channel; the next request given
// that wait must not re-send on it (it sends once, its reply at 0.5 s of
// a 1 s window), nor on the former request's schedule.
func TestAttack36bPooledWaitNoStalePoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := silenceMux()
		rs := Resend{First: time.Second, AfterNotice: time.Second, Max: 3}
		w, err := a.await(0, nil, rs)
		if err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		w.poke <- struct{}{} // the fire's, not read yet
		a.mu.Unlock()
		a.deliver(&nats.Msg{Subject: w.inbox})
		<-w.ch
		a.Done(w, true)
		sends, reused := 0, false
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = a.RequestUntil(ctx, time.Time{}, nil, rs, func(in string) error {
			if sends++; sends == 1 {
				a.mu.Lock()
				reused = a.waiting[in] == w
				a.mu.Unlock()
				time.AfterFunc(500*time.Millisecond, func() { a.deliver(&nats.Msg{Subject: in}) })
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !reused {
			t.Skip("the pool gave a new wait")
		}
		if sends != 1 {
			t.Fatalf("%d sends, want 1: a stale poke re-sent", sends)
		}
	})
}
