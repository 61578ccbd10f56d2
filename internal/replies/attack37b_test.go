package replies

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestAttack37bNonPositiveWindows (session 37, red team b): the client
// takes Config.Resend's durations as given but for zero (cmp.Or), so a
// caller's negative First panicked in rand.N inside await, holding the
// Mux's lock, and a negative AfterNotice in take, on the notices'
// subscription goroutine (a hostile router's notice then crashed the
// process); a zero window had fire spin under the lock until the waiter
// took each re-send. A window is at least a millisecond: the re-sends
// come, at most Max, a millisecond apart at the soonest.
func TestAttack37bNonPositiveWindows(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0} {
		t.Run(d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := silenceMux()
				rs := Resend{First: d, AfterNotice: d, Max: 3, ReplyID: "r1"}
				inbox := make(chan string, 1)
				var sends []time.Time
				done := make(chan struct{})
				go func() {
					defer close(done)
					ctx, cancel := context.WithTimeout(t.Context(), time.Second)
					defer cancel()
					_, _ = a.RequestUntil(ctx, time.Time{}, nil, rs, func(in string) error {
						if sends = append(sends, time.Now()); len(sends) == 1 {
							inbox <- in
						}
						return nil
					})
				}()
				a.n.take(noticeFor(t, <-inbox, "r1"))
				<-done
				if len(sends) > 1+rs.Max {
					t.Fatalf("%d sends, want at most %d", len(sends), 1+rs.Max)
				}
				for i := 1; i < len(sends); i++ {
					if gap := sends[i].Sub(sends[i-1]); gap < time.Millisecond {
						t.Fatalf("re-send %d %v after the one before, want at least 1ms", i, gap)
					}
				}
				if len(a.n.q) != 0 || len(a.waiting) != 0 {
					t.Fatalf("%d windows, %d waits left", len(a.n.q), len(a.waiting))
				}
			})
		})
	}
}
