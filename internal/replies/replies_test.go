package replies

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// A write whose wait ended before its reply came does not lend its channel
// to the next write: the late reply would be taken for that write's.
func TestAckWaitNotReusedWhileItsReplyMayCome(t *testing.T) {
	a := New(nil, Options{KeepInbox: true}) // no subscription: deliver is called by hand
	w, err := a.Await(0)
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	delete(a.waiting, w.inbox) // deliver took it, and is about to send
	a.mu.Unlock()
	a.Done(w, false)
	for range 100 {
		next, _ := a.Await(0)
		if next == w {
			t.Fatal("a wait whose reply may still come was reused")
		}
		a.Done(next, false)
	}
	a.deliver(&nats.Msg{Subject: "_INBOX.t.none"}) // no write waits for it: dropped
}

// A publisher's waits are bounded (Await returns none past max), and a
// reconnect ends each with a nil reply, as it fails jetstream's
// asynchronous publishes; Flush waits until none is left.
func TestAckWaitsBoundedAndReset(t *testing.T) {
	a := New(nil, Options{Reset: true, KeepInbox: true}) // no subscription
	w1, _ := a.Await(2)
	w2, _ := a.Await(2)
	if w, err := a.Await(2); w != nil || err != nil {
		t.Fatalf("a third wait past 2: %v, %v", w, err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- a.Flush(t.Context()) }()
	status := make(chan nats.Status, 2)
	status <- nats.RECONNECTING
	status <- nats.CLOSED
	a.endOn(status)
	for _, w := range []*Wait{w1, w2} {
		if m := <-w.ch; m != nil {
			t.Fatalf("reset delivered %v", m)
		}
		a.Done(w, true)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if w, _ := a.Await(2); w == nil {
		t.Fatal("no wait after the reset")
	}
}

// A wait whose reply came keeps its inbox when reused (KeepInbox); one
// that ended before its reply came gets a new one (the late reply goes
// nowhere).
func TestAckWaitInboxReuse(t *testing.T) {
	a := New(nil, Options{KeepInbox: true}) // no subscription: deliver is called by hand
	seen := map[string]bool{}
	for range 100 {
		w, _ := a.Await(0)
		seen[w.inbox] = true
		a.deliver(&nats.Msg{Subject: w.inbox})
		<-w.ch
		a.Done(w, true)
	}
	if len(seen) > 75 { // the pool may drop a wait (a GC; the race detector drops a quarter)
		t.Fatalf("%d inboxes for 100 replied waits", len(seen))
	}
	w, _ := a.Await(0)
	old := w.inbox
	a.Done(w, false) // ended before its reply
	for range 100 {
		next, _ := a.Await(0)
		if next.inbox == old {
			t.Fatal("an inbox whose reply may still come was reused")
		}
		a.Done(next, false)
	}
}

// Without KeepInbox every request has an inbox of its own, replied or not:
// a second reply to a request (a worker that answers twice) reaches no
// other request's wait.
func TestFreshInboxPerRequest(t *testing.T) {
	a := New(nil, Options{})
	seen := map[string]bool{}
	for range 100 {
		w, _ := a.Await(0)
		if seen[w.inbox] {
			t.Fatalf("inbox %s given twice", w.inbox)
		}
		seen[w.inbox] = true
		a.deliver(&nats.Msg{Subject: w.inbox})
		<-w.ch
		a.Done(w, true)
		a.deliver(&nats.Msg{Subject: w.inbox, Data: []byte("again")}) // dropped
	}
	if len(a.waiting) != 0 {
		t.Fatalf("%d waits left", len(a.waiting))
	}
}

// The cases of a request's wait, each on a real server: its own reply, a
// reply to an inbox nobody waits for, a timeout whose late reply must not
// reach the next request, a context ended, and the connection closed.
func TestWaitCases(t *testing.T) {
	s := testkit.RunServer(t)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, nc *nats.Conn, a *Mux)
	}{
		{"own reply", func(t *testing.T, nc *nats.Conn, a *Mux) {
			w, _ := a.Await(0)
			if err := nc.Publish(w.Inbox(), []byte("r1")); err != nil {
				t.Fatal(err)
			}
			if m := w.Wait(t.Context(), 5*time.Second); m == nil || string(m.Data) != "r1" {
				t.Fatalf("got %v", m)
			}
			a.Done(w, true)
		}},
		{"unknown token", func(t *testing.T, nc *nats.Conn, a *Mux) {
			w, _ := a.Await(0)
			if err := nc.Publish(a.prefix+"zzzz", []byte("stray")); err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish(w.Inbox(), []byte("mine")); err != nil {
				t.Fatal(err)
			}
			if m := w.Wait(t.Context(), 5*time.Second); m == nil || string(m.Data) != "mine" {
				t.Fatalf("got %v", m)
			}
			a.Done(w, true)
		}},
		{"late reply of a timed-out request", func(t *testing.T, nc *nats.Conn, a *Mux) {
			w1, _ := a.Await(0)
			old := w1.Inbox()
			if m := w1.Wait(t.Context(), time.Millisecond); m != nil {
				t.Fatalf("a reply nobody sent: %v", m)
			}
			a.Done(w1, false)
			w2, _ := a.Await(0)
			if w2.Inbox() == old {
				t.Fatal("the timed-out request's inbox was given again")
			}
			if err := nc.Publish(old, []byte("late")); err != nil { // the first request's late reply
				t.Fatal(err)
			}
			if err := nc.Publish(w2.Inbox(), []byte("second")); err != nil {
				t.Fatal(err)
			}
			if m := w2.Wait(t.Context(), 5*time.Second); m == nil || string(m.Data) != "second" {
				t.Fatalf("the second request got %v", m)
			}
			a.Done(w2, true)
		}},
		{"context ended", func(t *testing.T, nc *nats.Conn, a *Mux) {
			w, _ := a.Await(0)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if m := w.Wait(ctx, 0); m != nil {
				t.Fatalf("got %v", m)
			}
			a.Done(w, false)
			if len(a.waiting) != 0 {
				t.Fatal("an ended wait is still registered")
			}
		}},
		{"connection closed", func(t *testing.T, nc *nats.Conn, a *Mux) {
			w, _ := a.Await(0)
			nc.Close()
			if m := w.Wait(t.Context(), 5*time.Second); m != nil {
				t.Fatalf("got %v", m)
			}
			a.Done(w, true)
			testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
				if _, err := a.Await(0); err != nats.ErrConnectionClosed {
					return fmt.Errorf("await after close: %v", err)
				}
				return nil
			})
		}},
		{"unsubscribed under a wait", func(t *testing.T, nc *nats.Conn, a *Mux) {
			// The wait's reply can no longer come: it ends at once, not
			// at its bound.
			w, _ := a.Await(0)
			a.Unsubscribe()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if m := w.Wait(ctx, 0); m != nil || ctx.Err() != nil {
				t.Fatalf("got %v, %v: the wait outlived its subscription", m, ctx.Err())
			}
			a.Done(w, false)
			if _, err := a.Await(0); err != nats.ErrConnectionClosed {
				t.Fatalf("await after unsubscribe: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := testkit.Connect(t, s)
			a := New(nc, Options{EndOnClose: true})
			w, err := a.Await(0) // subscribes
			if err != nil {
				t.Fatal(err)
			}
			a.Done(w, false)
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			tc.run(t, nc, a)
		})
	}
}

// Many requests at once, each answered by a responder that echoes the
// request: every wait gets its own request's reply.
func TestConcurrentRequests(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	if _, err := nc.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	a := New(nc, Options{EndOnClose: true})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				want := fmt.Sprintf("%d-%d", g, i)
				w, err := a.Await(0)
				if err != nil {
					errs <- err
					return
				}
				if err := nc.PublishMsg(&nats.Msg{Subject: "echo", Reply: w.Inbox(), Data: []byte(want)}); err != nil {
					errs <- err
					return
				}
				m := w.Wait(t.Context(), 10*time.Second)
				a.Done(w, m != nil)
				if m == nil || string(m.Data) != want {
					errs <- fmt.Errorf("request %s got %v", want, m)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// With Unguessable, an inbox says nothing of the next: its last token is
// not a count (a worker given one inbox could otherwise answer the next
// request), and no two waits share one.
func TestUnguessableInboxes(t *testing.T) {
	a := New(nil, Options{Unguessable: true})
	seen := map[string]bool{}
	for i := range 100 {
		w, _ := a.Await(0)
		token := strings.TrimPrefix(w.Inbox(), a.prefix)
		if token == strconv.FormatUint(uint64(i+1), 36) || seen[w.Inbox()] {
			t.Fatalf("inbox %d: %s", i, w.Inbox())
		}
		seen[w.Inbox()] = true
		a.Done(w, false)
	}
}

// A request's wait costs no allocation: no channel, timer or registration
// of its own (what nats.go's request takes per call), and without
// KeepInbox its new inbox is carved out of a shared block (internal/slab),
// one allocation per block.
func TestWaitAllocations(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want float64
	}{{Options{KeepInbox: true}, 0}, {Options{}, 0}, {Options{Unguessable: true}, 0}, {Options{Unguessable: true, Progress: func(any, *nats.Msg) {}}, 0}} {
		a := New(nil, tc.opts)
		m := &nats.Msg{}
		got := testing.AllocsPerRun(1000, func() {
			w, _ := a.Await(0)
			m.Subject = w.Inbox()
			a.deliver(m)
			w.Wait(context.Background(), 0)
			a.Done(w, true)
		})
		if got > tc.want && !raceEnabled {
			t.Errorf("%+v: %.1f allocations per wait, want at most %.0f", tc.opts, got, tc.want)
		}
	}
}

// BenchmarkWait is one request's wait on a Mux, its reply delivered by
// hand: what the router's exec request costs besides the publish.
func BenchmarkWait(b *testing.B) {
	a := New(nil, Options{Unguessable: true})
	m := &nats.Msg{}
	b.ReportAllocs()
	for b.Loop() {
		w, _ := a.Await(0)
		m.Subject = w.Inbox()
		a.deliver(m)
		w.Wait(context.Background(), 0)
		a.Done(w, true)
	}
}

// A request and its reply over a real server, through nats.go's request
// and through a Mux (fresh unguessable inboxes, as the router's exec): the
// server and the echoing responder are in both figures alike.
func BenchmarkRequest(b *testing.B) {
	s := testkit.RunServer(b)
	nc := testkit.Connect(b, s)
	rc := testkit.Connect(b, s)
	if _, err := rc.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		b.Fatal(err)
	}
	if err := rc.Flush(); err != nil {
		b.Fatal(err)
	}
	data := []byte("ping")
	b.Run("nats.go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: "echo", Data: data}); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
	b.Run("mux", func(b *testing.B) {
		a := New(nc, Options{EndOnClose: true, Unguessable: true})
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			w, err := a.Await(0)
			if err != nil {
				b.Fatal(err)
			}
			if err := nc.PublishMsg(&nats.Msg{Subject: "echo", Reply: w.Inbox(), Data: data}); err != nil {
				b.Fatal(err)
			}
			m := w.Wait(ctx, 0)
			a.Done(w, m != nil)
			if m == nil {
				b.Fatal("no reply")
			}
			cancel()
		}
	})
}

// A replied wait's Done takes no lock and touches no wait but its own: the
// reply's delivery took it out of waiting, and another wait that holds the
// map meanwhile stays awaited; Flush returns once that one is done too.
func TestDoneReplied(t *testing.T) {
	for _, keep := range []bool{false, true} {
		a := New(nil, Options{KeepInbox: keep}) // no subscription: deliver is called by hand
		w, _ := a.Await(0)
		other, _ := a.Await(0)
		inbox := w.inbox
		a.deliver(&nats.Msg{Subject: inbox})
		if m := <-w.C(); m == nil || m.Subject != inbox {
			t.Fatalf("keep %v: the reply is %v", keep, m)
		}
		a.mu.Lock() // held: Done(w, true) must not need it
		a.Done(w, true)
		_, waiting := a.waiting[other.inbox]
		n := len(a.waiting)
		a.mu.Unlock()
		if !waiting || n != 1 {
			t.Fatalf("keep %v: after Done(w, true) the other wait is waiting %v, %d waits", keep, waiting, n)
		}
		if keep && w.inbox != inbox {
			t.Fatalf("keep %v: a replied wait lost its inbox: %q", keep, w.inbox)
		}
		flushed := make(chan error, 1)
		go func() { flushed <- a.Flush(t.Context()) }()
		a.Done(other, false)
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
	}
}

// With Progress, a message to a registered wait's inbox + ".progress" is
// handed to Progress with the tag of the wait's request, and the wait goes
// on to its reply; progress to an inbox nobody waits for, or to a wait
// that ended (replied, or given up), is dropped, and counted dropped
// (session 37: a flood's progress past its wait's end was counted nowhere).
func TestProgressToItsWait(t *testing.T) {
	var got []string
	dropped := 0
	a := New(nil, Options{Unguessable: true, Progress: func(tag any, m *nats.Msg) { got = append(got, fmt.Sprint(tag, ":", string(m.Data))) },
		ProgressDropped: func(n int) { dropped += n }})
	w, _ := a.AwaitTagged("one")
	gone, _ := a.AwaitTagged("two")
	ended := gone.inbox
	a.Done(gone, false)
	for _, m := range []struct{ to, data string }{{w.inbox, "p1"}, {"_INBOX.t.none", "stray"}, {ended, "ended"}, {w.inbox, "p2"}} {
		a.deliver(&nats.Msg{Subject: m.to + bus.ProgressSuffix, Data: []byte(m.data)})
	}
	select {
	case m := <-w.C():
		t.Fatalf("progress taken for the reply: %v", m)
	default:
	}
	a.deliver(&nats.Msg{Subject: w.inbox, Data: []byte("reply")})
	if m := <-w.C(); string(m.Data) != "reply" {
		t.Fatalf("the reply: %v", m)
	}
	a.Done(w, true)
	a.deliver(&nats.Msg{Subject: w.inbox + bus.ProgressSuffix, Data: []byte("late")})
	if strings.Join(got, " ") != "one:p1 one:p2" || dropped != 3 {
		t.Fatalf("progress handed on: %q, %d counted dropped, want 3", got, dropped)
	}
}

// Progress comes apart from the replies, on its own goroutine, outside the
// lock, yet every progress sent before a request's reply is handed on
// before the request returns, and none once it returned, whether replied
// or given up: so a request may reset its tag's count between requests,
// as an exec resets its gate between attempts, which -race checks. The
// worker sends five progress messages before its reply and two after;
// every fourth request gets no reply (its deadline passes).
func TestProgressBeforeItsRequestReturns(t *testing.T) {
	s := testkit.RunServer(t)
	nc, wc := testkit.Connect(t, s), testkit.Connect(t, s)
	type count struct{ n int } // a tag's progress so far, no lock of its own
	if _, err := wc.Subscribe("exec", func(m *nats.Msg) {
		for i := range 7 {
			if i == 5 && string(m.Data) != "silent" {
				_ = wc.Publish(m.Reply, m.Data)
			}
			_ = wc.Publish(m.Reply+bus.ProgressSuffix, []byte("p"))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	a := New(nc, Options{Unguessable: true, Progress: func(tag any, _ *nats.Msg) {
		c := tag.(*count)
		n := c.n
		runtime.Gosched() // a wider window for a request that returned too soon
		c.n = n + 1
	}})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			tag := &count{}
			for i := range 40 {
				tag.n = 0
				data, deadline := "reply", time.Time{}
				if i%4 == 3 {
					data, deadline = "silent", time.Now().Add(20*time.Millisecond)
				}
				m, err := a.RequestUntil(t.Context(), deadline, tag, Resend{}, func(inbox string) error {
					return nc.PublishMsg(&nats.Msg{Subject: "exec", Reply: inbox, Data: []byte(data)})
				})
				switch {
				case data == "silent" && err != context.DeadlineExceeded:
					errs <- fmt.Errorf("%d/%d: a silent request ended with %v, %v", g, i, m, err)
				case data == "reply" && (err != nil || tag.n < 5):
					errs <- fmt.Errorf("%d/%d: replied %v, %v with %d progress handed on, want 5 or more", g, i, m, err, tag.n)
				default:
					continue
				}
				return
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A tagged wait whose result comes another way (a durable call's, through
// the ledger: protocol 5.3, 5.8) ends with Done(w, false): every progress
// read before Done is handed on before Done returns. The worker sends five
// progress messages and then the result on another subject, which the
// waiter reads on the Mux's connection, as a router reads its ledger watch.
func TestProgressBeforeItsWaitEnds(t *testing.T) {
	s := testkit.RunServer(t)
	nc, wc := testkit.Connect(t, s), testkit.Connect(t, s)
	type count struct{ n int }
	a := New(nc, Options{Unguessable: true, Progress: func(tag any, _ *nats.Msg) {
		c := tag.(*count)
		n := c.n
		runtime.Gosched()
		c.n = n + 1
	}})
	results := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe("result", results)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := wc.Subscribe("work", func(m *nats.Msg) {
		for range 5 {
			_ = wc.Publish(string(m.Data)+bus.ProgressSuffix, []byte("p"))
		}
		_ = wc.Publish("result", nil)
	}); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		tag := &count{}
		w, err := a.AwaitTagged(tag)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish("work", []byte(w.Inbox())); err != nil {
			t.Fatal(err)
		}
		testkit.Recv(t, results, 10*time.Second, "the result")
		a.Done(w, false)
		if tag.n != 5 {
			t.Fatalf("%d: %d progress handed on before Done returned, want 5", i, tag.n)
		}
	}
}

// A tagged wait's Done returns once nothing is queued or in hand, even when
// its mark is one too high: a mark taken after a progress message was
// counted but before the NATS client uncounted it (as its handler
// returned) counts that message twice, and no message may come to reach it
// (CI: TestAttackProgressStallsReplies's Done waited 7 minutes).
func TestDoneAfterAMarkTooHigh(t *testing.T) {
	s := testkit.RunServer(t)
	nc, wc := testkit.Connect(t, s), testkit.Connect(t, s)
	handed := make(chan struct{}, 1)
	a := New(nc, Options{Progress: func(any, *nats.Msg) { handed <- struct{}{} }})
	w, err := a.AwaitTagged(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscriptions before wc publishes
		t.Fatal(err)
	}
	if err := wc.Publish(w.Inbox()+bus.ProgressSuffix, []byte("p")); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, handed, 10*time.Second, "the progress")
	if err := wc.Publish(w.Inbox(), []byte("reply")); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, w.C(), 10*time.Second, "the reply")
	a.mu.Lock()
	w.mark, w.epoch = a.p.handled+1, a.p.drains // the window's mark
	a.mu.Unlock()
	done := make(chan struct{})
	go func() { a.Done(w, true); close(done) }()
	testkit.Recv(t, done, 10*time.Second, "Done")
}
