package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// fakeRouter takes the batches on P.call.s1 under prefix fake35, which no
// router serves: each copy goes to copies, and serve decides what to do
// with it (its index from 0).
type fakeRouter struct {
	nc     *nats.Conn
	copies chan *nats.Msg
}

func newFakeRouter(t *testing.T, serve func(nc *nats.Conn, m *nats.Msg, i int)) (*fakeRouter, *nats.Conn, func(client.Resend, time.Duration) (*bus.Reply, error)) {
	t.Helper()
	s := testkit.RunServer(t)
	f := &fakeRouter{nc: testkit.Connect(t, s), copies: make(chan *nats.Msg, 64)}
	n := 0
	if _, err := f.nc.Subscribe(bus.NewSubjects("fake35").Call("s1"), func(m *nats.Msg) {
		f.copies <- m
		serve(f.nc, m, n)
		n++
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	agent := testkit.Connect(t, s)
	call := func(rs client.Resend, timeout time.Duration) (*bus.Reply, error) {
		c := client.New(agent, client.Config{Prefix: "fake35", Source: "test/agent", Resend: rs})
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		return c.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "x"}}}, client.WithReplyID("r1"))
	}
	return f, agent, call
}

// seen is how many copies reached the fake router once everything the
// agent published has (agent flushed, then the fake's connection).
func (f *fakeRouter) seen(t *testing.T, agent *nats.Conn) int {
	t.Helper()
	for _, nc := range []*nats.Conn{agent, f.nc} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return len(f.copies)
}

func replyTo(nc *nats.Conn, m *nats.Msg) {
	_ = bus.Respond(nc, m, "test/router", bus.TypeCallReply, bus.Reply{Results: []bus.Result{{ID: "c1", Name: "x", State: bus.StateSuccess}}, Parked: []bus.Parked{}})
}

// notice publishes a running notice of type typ naming replyID on m's reply + .running.
func notice(nc *nats.Conn, m *nats.Msg, typ, replyID string) {
	e, _ := bus.NewEvent(typ, "test/router", map[string][]string{"running": {"c1"}})
	e.SessionID, e.ReplyID = "s1", replyID
	_ = bus.Publish(nc, m.Reply+bus.RunningSuffix, e)
}

// TestResendAfterSilence: the first copy lost (the fake router drops it),
// the client sends the same bytes again after the first window, under
// the same reply subject, and the second copy's reply is the call's.
func TestResendAfterSilence(t *testing.T) {
	f, _, call := newFakeRouter(t, func(nc *nats.Conn, m *nats.Msg, i int) {
		if i == 1 {
			replyTo(nc, m)
		}
	})
	rep, err := call(client.Resend{First: 100 * time.Millisecond}, 30*time.Second)
	if err != nil || len(rep.Results) != 1 || rep.Results[0].State != bus.StateSuccess {
		t.Fatalf("%+v, %v", rep, err)
	}
	a, b := <-f.copies, <-f.copies
	if !bytes.Equal(a.Data, b.Data) || a.Reply != b.Reply || a.Subject != b.Subject || len(a.Header) != len(b.Header) {
		t.Fatalf("the re-sent copy differs:\n%s %s\n%s %s", a.Reply, a.Data, b.Reply, b.Data)
	}
	for k := range a.Header {
		if a.Header.Get(k) != b.Header.Get(k) {
			t.Fatalf("header %s: %q, then %q", k, a.Header.Get(k), b.Header.Get(k))
		}
	}
}

// TestNoticesHoldResendsOff: a router that says the batch runs, every
// period, is never sent a second copy, though its reply comes after two
// first windows and four windows after a notice; and no copy follows the
// reply.
func TestNoticesHoldResendsOff(t *testing.T) {
	f, agent, call := newFakeRouter(t, func(nc *nats.Conn, m *nats.Msg, i int) {
		if i > 0 {
			return
		}
		go func() {
			tick := time.NewTicker(20 * time.Millisecond) // the fake router's period
			defer tick.Stop()
			for range 100 { // 2 s: four windows after a notice, two first windows
				notice(nc, m, bus.TypeCallRunning, "r1")
				<-tick.C
			}
			replyTo(nc, m)
		}()
	})
	rep, err := call(client.Resend{First: time.Second, AfterNotice: 500 * time.Millisecond}, 30*time.Second)
	if err != nil || len(rep.Results) != 1 {
		t.Fatalf("%+v, %v", rep, err)
	}
	if n := f.seen(t, agent); n != 1 {
		t.Fatalf("%d copies, want 1", n)
	}
}

// TestResendAtMostMax: with no router answering, the client sends Max
// copies more, then waits until its timeout and fails as before; Off
// sends one.
func TestResendAtMostMax(t *testing.T) {
	for _, tc := range []struct {
		rs   client.Resend
		want int
	}{{client.Resend{First: 30 * time.Millisecond, Max: 2}, 3}, {client.Resend{First: 30 * time.Millisecond, Off: true}, 1}} {
		f, agent, call := newFakeRouter(t, func(*nats.Conn, *nats.Msg, int) {})
		start := time.Now()
		_, err := call(tc.rs, time.Second)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < time.Second {
			t.Fatalf("%+v: %v after %v, want the timeout's error at 1s", tc.rs, err, time.Since(start))
		}
		if n := f.seen(t, agent); n != tc.want {
			t.Fatalf("%+v: %d copies, want %d", tc.rs, n, tc.want)
		}
	}
}

// TestResendNegativeRefused: a negative window or Max fails every Call
// with an error naming it, nothing sent, as the Python and Java clients
// refuse such settings; zero fields are the defaults.
func TestResendNegativeRefused(t *testing.T) {
	f, agent, call := newFakeRouter(t, func(nc *nats.Conn, m *nats.Msg, _ int) { replyTo(nc, m) })
	for _, rs := range []client.Resend{{First: -time.Second}, {AfterNotice: -time.Millisecond}, {Max: -1}, {Max: -1, Off: true}} {
		if _, err := call(rs, time.Second); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%+v: %v, want refused", rs, err)
		}
	}
	if n := f.seen(t, agent); n != 0 {
		t.Fatalf("%d copies sent, want none", n)
	}
	if _, err := call(client.Resend{}, 10*time.Second); err != nil || f.seen(t, agent) != 1 {
		t.Fatalf("zero fields (the defaults): %v", err)
	}
}

// TestOtherNoticesDoNotCount: notices of another reply id, of another
// type, or not events at all neither hold the re-send off nor end the
// call; the re-sent copy is answered.
func TestOtherNoticesDoNotCount(t *testing.T) {
	f, agent, call := newFakeRouter(t, func(nc *nats.Conn, m *nats.Msg, i int) {
		if i == 1 {
			replyTo(nc, m)
			return
		}
		for range 20 {
			notice(nc, m, bus.TypeCallRunning, "other")
			notice(nc, m, bus.TypeCallProgress, "r1")
			_ = nc.Publish(m.Reply+bus.RunningSuffix, []byte("not an event"))
		}
	})
	// Counted, a notice would hold the re-send off for a minute, past the timeout.
	rep, err := call(client.Resend{First: 100 * time.Millisecond, AfterNotice: time.Minute}, 30*time.Second)
	if err != nil || len(rep.Results) != 1 {
		t.Fatalf("%+v, %v", rep, err)
	}
	if n := f.seen(t, agent); n < 2 {
		t.Fatalf("%d copies, want a re-send", n)
	}
}

// TestForgedNoticeFlood (attack, docs/security.md): whoever may publish on
// the agent's inbox floods forged notices naming the batch while no router
// exists: they hold the re-sends off, and nothing more; the call ends at
// its timeout with the timeout's error, no result made of a notice.
func TestForgedNoticeFlood(t *testing.T) {
	f, agent, call := newFakeRouter(t, func(nc *nats.Conn, m *nats.Msg, i int) {
		go func() {
			for range 5000 {
				notice(nc, m, bus.TypeCallRunning, "r1")
			}
		}()
	})
	start := time.Now()
	rep, err := call(client.Resend{First: 50 * time.Millisecond, AfterNotice: 50 * time.Millisecond}, 1500*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || rep != nil {
		t.Fatalf("%+v, %v: want the timeout's error", rep, err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("the call ended after %v", el)
	}
	if n := f.seen(t, agent); n < 1 || n > 4 {
		t.Fatalf("%d copies: want 1 to 4 (Max 3)", n)
	}
}
