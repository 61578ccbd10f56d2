package replies

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// silenceMux is a Mux taking notices by hand (take), replies by hand
// (deliver), on synctest's clock.
func silenceMux() *Mux {
	a := New(nil, Options{Notices: true})
	a.once.Do(a.subscribe)
	a.n.sub, a.n.mux = new(nats.Subscription), a
	return a
}

// noticeFor is a running notice naming replyID on inbox + .running.
func noticeFor(t *testing.T, inbox, replyID string) *nats.Msg {
	e, err := bus.NewEvent(bus.TypeCallRunning, "test/router", map[string][]string{"running": {"c1"}})
	if err != nil {
		t.Fatal(err)
	}
	e.ReplyID = replyID
	var m *nats.Msg
	if err := bus.SendTrusted(inbox+bus.RunningSuffix, e, "", func(n *nats.Msg) error {
		m = &nats.Msg{Subject: n.Subject, Header: n.Header, Data: append([]byte(nil), n.Data...)} // n is pooled
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

// The windows of silence on the Mux's one timer (synctest): each re-send
// comes after its window (First, or AfterNotice past a counted notice),
// at most a fifth of it late (the jitter and the timer's slack); a
// notice of another reply id does not count; a reply or the deadline ends
// the re-sends; the deadline's error comes at the deadline.
func TestSilenceWindows(t *testing.T) {
	rs := Resend{First: time.Second, AfterNotice: 3 * time.Second, Max: 3, ReplyID: "r1"}
	for _, tc := range []struct {
		name string
		rs   Resend
		// at says what happens at each step from the start: a notice
		// naming the reply id given, or ("reply") the reply.
		at map[time.Duration]string
		// want: the sends' windows (from the send or notice before),
		// the first at 0.
		want []time.Duration
		err  error
	}{
		{"silence", rs, nil, []time.Duration{0, time.Second, time.Second, time.Second}, context.DeadlineExceeded},
		{"reply", rs, map[time.Duration]string{1500 * time.Millisecond: "reply"}, []time.Duration{0, time.Second}, nil},
		{"notices hold off", rs, map[time.Duration]string{500 * time.Millisecond: "r1", 3 * time.Second: "r1", 5 * time.Second: "r1", 7 * time.Second: "reply"}, []time.Duration{0}, nil},
		{"notice past its window", rs, map[time.Duration]string{500 * time.Millisecond: "r1"}, []time.Duration{0, 3 * time.Second, time.Second, time.Second}, context.DeadlineExceeded},
		{"other reply id", rs, map[time.Duration]string{500 * time.Millisecond: "r2"}, []time.Duration{0, time.Second, time.Second, time.Second}, context.DeadlineExceeded},
		{"notice window shorter", Resend{First: 5 * time.Second, AfterNotice: time.Second, Max: 1, ReplyID: "r1"}, map[time.Duration]string{100 * time.Millisecond: "r1"}, []time.Duration{0, time.Second}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := silenceMux()
				start := time.Now()
				var mu sync.Mutex
				var sends []time.Duration
				inbox := make(chan string, 1)
				done := make(chan struct{})
				var err error
				go func() {
					defer close(done)
					// A context's deadline: the pooled timers may be another bubble's.
					ctx, cancel := context.WithDeadline(t.Context(), start.Add(20*time.Second))
					defer cancel()
					_, err = a.RequestUntil(ctx, time.Time{}, nil, tc.rs, func(in string) error {
						mu.Lock()
						defer mu.Unlock()
						if sends = append(sends, time.Since(start)); len(sends) == 1 {
							inbox <- in
						}
						return nil
					})
				}()
				in := <-inbox
				for step := time.Duration(0); step < 20*time.Second; step += 100 * time.Millisecond {
					time.Sleep(start.Add(step).Sub(time.Now()))
					switch what := tc.at[step]; what {
					case "":
					case "reply":
						a.deliver(&nats.Msg{Subject: in})
					default:
						a.n.take(noticeFor(t, in, what))
					}
				}
				<-done
				if !errors.Is(err, tc.err) {
					t.Fatalf("%v, want %v", err, tc.err)
				}
				if tc.err != nil && time.Since(start) != 20*time.Second {
					t.Fatalf("ended after %v, want the deadline's 20s", time.Since(start))
				}
				if len(sends) != len(tc.want) {
					t.Fatalf("sends at %v, want %d", sends, len(tc.want))
				}
				last := time.Duration(0)
				for i, at := range sends[1:] {
					from := last // the send or counted notice before
					for step, what := range tc.at {
						if what == tc.rs.ReplyID && step > from && step < at {
							from = step
						}
					}
					if w := tc.want[i+1]; at-from < w || at-from > w+w/5 {
						t.Fatalf("sends at %v: re-send %d after %v, want %v to %v", sends, i+1, at-from, w, w+w/5)
					}
					last = at
				}
			})
		})
	}
}

// Windows that end a millisecond apart share the Mux's timer: 500 waits
// each re-send within a fifth of its window, at no more than one instant
// per slack (a fiftieth of the window), not one each.
func TestSilenceWindowsStaggered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := silenceMux()
		rs := Resend{First: time.Second, AfterNotice: time.Second, Max: 1}
		t0 := time.Now()
		var mu sync.Mutex
		fires := map[time.Duration]bool{} // the instants of the re-sends
		var wg sync.WaitGroup
		for i := range 500 {
			start := time.Now()
			wg.Go(func() {
				n := 0
				ctx, cancel := context.WithDeadline(t.Context(), start.Add(3*time.Second))
				defer cancel()
				_, _ = a.RequestUntil(ctx, time.Time{}, i, rs, func(string) error {
					if n++; n == 2 {
						if late := time.Since(start) - rs.First; late < 0 || late > rs.First/5 {
							t.Errorf("a re-send %v after its window, want at most %v", late, rs.First/5)
						}
						mu.Lock()
						fires[time.Since(t0)] = true
						mu.Unlock()
					}
					return nil
				})
			})
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		// The dues spread over 0.5 s + 18 % of a window: at most 34 slacks.
		if len(fires) > 40 {
			t.Fatalf("re-sends at %d instants, want at most 40", len(fires))
		}
		if len(a.waiting) != 0 {
			t.Fatalf("%d waits left", len(a.waiting))
		}
	})
}

// BenchmarkRequestUntil is a call's wait as the client makes it, the
// reply delivered by hand as it is sent: a deadline (a Call whose context
// has none), and re-sends off or on (the client's defaults).
func BenchmarkRequestUntil(b *testing.B) {
	for _, tc := range []struct {
		name string
		rs   Resend
	}{{"off", Resend{}}, {"on", Resend{First: 6 * time.Second, AfterNotice: 15 * time.Second, Max: 3, ReplyID: "r1"}}} {
		b.Run(tc.name, func(b *testing.B) {
			a := silenceMux()
			m := &nats.Msg{}
			send := func(inbox string) error {
				m.Subject = inbox
				a.deliver(m)
				return nil
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.RequestUntil(context.Background(), time.Now().Add(time.Minute), nil, tc.rs, send); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The silence heap under churn (fire37, synctest): waits register, take
// notices (counted or not, moving their windows sooner or later), get
// their replies, end without them, and all end at once (a reset), in a
// random order, with windows of several lengths, while the timer fires.
// Checked each millisecond: the heap holds exactly the registered waits
// with re-sends left, each at its index, in order, the timer armed by the
// soonest late; each wait is told to re-send once per window, within a
// fifth of it past its window (start: its registration, the last re-send
// or counted notice), never past its Max nor after it ended; the re-sends
// come at least the smallest slack apart.
func TestSilenceHeapChurn(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { silenceChurn(t, seed) })
		})
	}
}

func silenceChurn(t *testing.T, seed uint64) {
	const step = time.Millisecond
	windows := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}
	type req struct {
		rs    Resend
		start time.Time // of its window, seen up to early after it (a poke: the step after its fire)
		early time.Duration
		d     time.Duration // its window
		sent  int
	}
	r := rand.New(rand.NewPCG(seed, 37))
	a := silenceMux()
	live, ws := map[*Wait]*req{}, []*Wait(nil) // ws: live's keys, in an order the seed gives
	pick := func() (int, *Wait) {
		i := r.IntN(len(ws))
		return i, ws[i]
	}
	end := func(i int, replied bool) {
		a.Done(ws[i], replied)
		delete(live, ws[i])
		ws[i] = ws[len(ws)-1]
		ws = ws[:len(ws)-1]
	}
	var lastFire time.Time
	for i := range 8000 {
		time.Sleep(step)
		synctest.Wait()
		now := time.Now()
		for w, q := range live {
			select {
			case <-w.poke:
				if el := now.Sub(q.start); q.sent >= q.rs.Max || el < q.d-q.early || el > q.d+q.d/5+step {
					t.Fatalf("step %d: a re-send %v into a window of %v, %d of %d sent", i, el, q.d, q.sent, q.rs.Max)
				}
				if !lastFire.IsZero() && now != lastFire && now.Sub(lastFire) < windows[0]/50-step {
					t.Fatalf("step %d: re-sends %v apart", i, now.Sub(lastFire))
				}
				lastFire, q.start, q.early, q.d = now, now, step, q.rs.First
				q.sent++
			default:
				if q.sent < q.rs.Max && now.Sub(q.start) > q.d+q.d/5+step {
					t.Fatalf("step %d: no re-send %v into a window of %v", i, now.Sub(q.start), q.d)
				}
			}
		}
		switch op := r.IntN(100); {
		case i == 4000 || op == 10 && r.IntN(80) == 0:
			a.endWaits(false)
			for len(ws) > 0 {
				<-ws[0].ch
				end(0, false)
			}
		case op < 5 || len(live) < 20:
			rs := Resend{First: windows[r.IntN(4)], AfterNotice: windows[r.IntN(4)], Max: 1 + r.IntN(3), ReplyID: fmt.Sprint(i)}
			w, err := a.await(0, nil, rs)
			if err != nil {
				t.Fatal(err)
			}
			live[w], ws = &req{rs: rs, start: now, d: rs.First}, append(ws, w)
		case op < 8:
			_, w := pick()
			if q := live[w]; r.IntN(4) == 0 {
				a.n.take(noticeFor(t, w.inbox, "other"))
			} else if a.n.take(noticeFor(t, w.inbox, q.rs.ReplyID)); q.sent < q.rs.Max {
				q.start, q.early, q.d = now, 0, q.rs.AfterNotice
			}
		case op < 9:
			k, w := pick()
			a.deliver(&nats.Msg{Subject: w.inbox})
			<-w.ch
			end(k, true)
		case op < 10:
			k, _ := pick()
			end(k, false)
		}
		checkSilences(t, a, live)
	}
	for len(ws) > 0 {
		end(0, false)
	}
	checkSilences(t, a, live)
}

// checkSilences checks the Mux's heap of windows against the waits under
// way: exactly those with re-sends left, each at its index, in heap order,
// the timer armed by the soonest end.
func checkSilences[V any](t *testing.T, a *Mux, live map[*Wait]V) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	q, in := a.n.q, 0
	for w := range live {
		if a.waiting[w.inbox] != w {
			t.Fatalf("a wait under way is not registered")
		}
		if !w.due.IsZero() {
			if in++; w.i >= len(q) || q[w.i] != w {
				t.Fatalf("a wait with re-sends left is not at its index in the heap")
			}
		}
	}
	if in != len(q) || len(a.waiting) != len(live) {
		t.Fatalf("%d waits in the heap, %d with re-sends left; %d registered, %d under way", len(q), in, len(a.waiting), len(live))
	}
	for i := 1; i < len(q); i++ {
		if q[i].late.Before(q[(i-1)/2].late) {
			t.Fatalf("the heap is out of order at %d", i)
		}
	}
	if len(q) > 0 && (a.n.at.IsZero() || a.n.at.After(q[0].late)) {
		t.Fatalf("the timer is armed at %v, the soonest end at %v", a.n.at, q[0].late)
	}
}
