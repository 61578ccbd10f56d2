package replies

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
)

// TestAttack37bNonPositiveWindows (session 37, red team b): the client
// takes Config.Resend's durations as given but for zero (cmp.Or), so a
// caller's negative First panicked in rand.N inside await, holding the
// Mux's lock, and a negative AfterNotice in take, on the notices'
// subscription goroutine (a hostile router's notice then crashed the
// process); a zero window had fire spin under the lock until the waiter
// took each re-send; a negative Max brought one re-send. A window is at
// least a millisecond: the re-sends come, at most Max, a millisecond apart
// at the soonest, and none for a Max below one.
func TestAttack37bNonPositiveWindows(t *testing.T) {
	for _, rs := range []Resend{{First: -time.Second, AfterNotice: -time.Second, Max: 3}, {Max: 3}, {First: time.Millisecond, AfterNotice: time.Millisecond, Max: -1}} {
		t.Run(fmt.Sprint(rs.First, rs.Max), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := silenceMux()
				rs.ReplyID = "r1"
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
				if len(sends) > 1+max(rs.Max, 0) {
					t.Fatalf("%d sends, want at most %d", len(sends), 1+max(rs.Max, 0))
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

// TestAttack37bLateNoticesChangeNothing (session 37, red team b: held): a
// hostile router's notices and replies for waits that ended (replied,
// Done, past their Max) or on inboxes a reused wait left, and a second
// reply, put no wait back in the heap, move no window, and bring no
// re-send: the heap holds exactly the waits with re-sends left.
func TestAttack37bLateNoticesChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := silenceMux()
		rs := Resend{First: time.Second, AfterNotice: time.Second, Max: 1, ReplyID: "r"}
		replied, _ := a.await(0, nil, rs)
		gone, _ := a.await(0, nil, rs)
		spent, _ := a.await(0, nil, rs)
		live, _ := a.await(0, nil, Resend{First: time.Hour, AfterNotice: time.Hour, Max: 3, ReplyID: "r"})
		old := []string{replied.inbox, gone.inbox, spent.inbox}
		a.deliver(&nats.Msg{Subject: replied.inbox})
		<-replied.C()
		a.Done(replied, true)
		a.Done(gone, false)
		time.Sleep(1300 * time.Millisecond) // spent's one re-send
		<-spent.poke
		reused, _ := a.await(0, nil, Resend{}) // gone's, with a new inbox
		for range 3 {
			for _, in := range old {
				a.n.take(noticeFor(t, in, "r"))
				a.deliver(&nats.Msg{Subject: in}) // spent's reply, then none
			}
			time.Sleep(2 * time.Second)
		}
		for _, w := range []*Wait{spent, live, reused} {
			select {
			case <-w.poke:
				t.Fatal("a re-send after the wait's last")
			default:
			}
		}
		a.Done(spent, true)
		checkSilences(t, a, map[*Wait]bool{live: true, reused: true})
		if len(a.n.q) != 1 || a.n.q[0] != live {
			t.Fatalf("%d windows, want live's alone", len(a.n.q))
		}
	})
}
