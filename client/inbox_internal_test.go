package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	waits "github.com/toolbus/toolbus/internal/replies"
	"github.com/toolbus/toolbus/internal/testkit"
)

// The reply inboxes against a server: each case answers the requests
// its own way and checks what request returns, and that the reply
// subscription is kept for the next request.
func TestRepliesRequest(t *testing.T) {
	s := testkit.RunServer(t)
	for _, tc := range []struct {
		name    string
		answer  func(nc *nats.Conn, m *nats.Msg) // nil: nobody subscribes
		timeout time.Duration
		want    string // the reply's data
		err     error
	}{
		{"a reply", func(nc *nats.Conn, m *nats.Msg) { _ = nc.Publish(m.Reply, []byte("r:"+string(m.Data[:1]))) }, 5 * time.Second, "r:{", nil},
		{"a late reply of another request first", func(nc *nats.Conn, m *nats.Msg) {
			_ = nc.Publish(m.Reply+"x", []byte("late")) // another request's subject
			_ = nc.Publish(m.Reply, []byte("mine"))
		}, 5 * time.Second, "mine", nil},
		{"no responders", nil, 5 * time.Second, "", nats.ErrNoResponders},
		{"no reply before the deadline", func(*nats.Conn, *nats.Msg) {}, 50 * time.Millisecond, "", context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, srv := testkit.Connect(t, s), testkit.Connect(t, s)
			if tc.answer != nil {
				if _, err := srv.Subscribe("svc", func(m *nats.Msg) { tc.answer(srv, m) }); err != nil {
					t.Fatal(err)
				}
				if err := srv.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			r := newReplies(nc, false)
			e, err := bus.NewEvent(bus.TypeAdmin, "test", struct{}{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 { // the subscription serves the next request too
				ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
				m, err := r.requestUntil(ctx, time.Time{}, "svc", e, false, waits.Resend{})
				cancel()
				if !errors.Is(err, tc.err) || err == nil && string(m.Data) != tc.want {
					t.Fatalf("request %d: %v, %v; want %q, %v", i, m, err, tc.want, tc.err)
				}
				if n := nc.NumSubscriptions(); n != 1 {
					t.Fatalf("request %d: %d subscriptions kept, want 1", i, n)
				}
			}
		})
	}
}

// TestRepliesRequestUntil: a deadline kept by the wait (the exchange's
// default timeout, without a context made for it) ends a request as a
// context with that deadline does, and one that has passed sends nothing.
func TestRepliesRequestUntil(t *testing.T) {
	s := testkit.RunServer(t)
	nc, srv := testkit.Connect(t, s), testkit.Connect(t, s)
	if _, err := srv.Subscribe("svc", func(m *nats.Msg) {
		if !strings.Contains(string(m.Data), `"q":1`) { // the second request is never answered
			_ = srv.Publish(m.Reply, []byte("r"))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	r := newReplies(nc, false)
	event := func(q int) *bus.Event {
		e, err := bus.NewEvent(bus.TypeAdmin, "test", struct {
			Q int `json:"q"`
		}{q})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if m, err := r.requestUntil(t.Context(), time.Now().Add(10*time.Second), "svc", event(0), false, waits.Resend{}); err != nil || string(m.Data) != "r" {
		t.Fatalf("answered before its deadline: %v, %v", m, err)
	}
	if _, err := r.requestUntil(t.Context(), time.Now().Add(50*time.Millisecond), "svc", event(1), false, waits.Resend{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered: %v, want %v", err, context.DeadlineExceeded)
	}
	if _, err := r.requestUntil(t.Context(), time.Now().Add(-time.Millisecond), "svc", event(2), false, waits.Resend{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline passed: %v, want %v", err, context.DeadlineExceeded)
	}
	if n := nc.Stats().OutMsgs; n != 2 {
		t.Fatalf("%d requests sent, want 2 (none past its deadline)", n)
	}
	if n := nc.NumSubscriptions(); n != 1 {
		t.Fatalf("%d subscriptions kept, want 1", n)
	}
}

// TestRepliesClosed: a connection closed under a request ends it at
// once, as nats.go's request does.
func TestRepliesClosed(t *testing.T) {
	s := testkit.RunServer(t)
	nc, srv := testkit.Connect(t, s), testkit.Connect(t, s)
	got := make(chan struct{})
	if _, err := srv.Subscribe("svc", func(*nats.Msg) { close(got) }); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	r := newReplies(nc, false)
	e, _ := bus.NewEvent(bus.TypeAdmin, "test", struct{}{})
	done := make(chan error, 1)
	go func() {
		_, err := r.requestUntil(t.Context(), time.Time{}, "svc", e, false, waits.Resend{})
		done <- err
	}()
	testkit.Recv(t, got, 5*time.Second, "the request")
	nc.Close()
	if err := testkit.Recv(t, done, 5*time.Second, "the request's end"); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("request on a closed connection: %v", err)
	}
	if _, err := r.requestUntil(t.Context(), time.Time{}, "svc", e, false, waits.Resend{}); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("request after close: %v", err)
	}
}

// TestRepliesKeepsAtMost: requests under way at once share one reply
// subscription (the bound on what a Client keeps subscribed), and each
// gets its own reply.
func TestRepliesKeepsAtMost(t *testing.T) {
	s := testkit.RunServer(t)
	nc, srv := testkit.Connect(t, s), testkit.Connect(t, s)
	const n = 64
	held := make(chan *nats.Msg, n)
	if _, err := srv.Subscribe("svc", func(m *nats.Msg) { held <- m }); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	r := newReplies(nc, false)
	done := make(chan error, n)
	for i := range n {
		go func() {
			e, err := bus.NewEvent(bus.TypeAdmin, "test", map[string]int{"i": i})
			if err == nil {
				var m *nats.Msg
				if m, err = r.requestUntil(t.Context(), time.Time{}, "svc", e, false, waits.Resend{}); err == nil && string(m.Data) != string(e.Data) {
					err = fmt.Errorf("request %d: reply %s", i, m.Data)
				}
			}
			done <- err
		}()
	}
	var ms []*nats.Msg
	for range n {
		ms = append(ms, testkit.Recv(t, held, 5*time.Second, "a request"))
	}
	if got := nc.NumSubscriptions(); got != 1 {
		t.Fatalf("%d requests under way on %d subscriptions, want 1", n, got)
	}
	for _, m := range ms {
		e, err := bus.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		_ = srv.Publish(m.Reply, e.Data)
	}
	for range n {
		if err := testkit.Recv(t, done, 5*time.Second, "a reply"); err != nil {
			t.Fatal(err)
		}
	}
}

// replySubs are a Client's reply subscriptions: the replies' and the
// running notices' (docs/protocol.md 3.2.1).
const replySubs = 2

// TestClientLetGo: a Client let go without Close leaves no reply
// subscription on its connection once collected.
func TestClientLetGo(t *testing.T) {
	s := testkit.RunServer(t)
	nc, srv := testkit.Connect(t, s), testkit.Connect(t, s)
	if _, err := srv.Subscribe("svc", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	before := nc.NumSubscriptions()
	func() {
		c := New(nc, Config{})
		e, _ := bus.NewEvent(bus.TypeAdmin, "test", struct{}{})
		if _, err := c.rq.replies.requestUntil(t.Context(), time.Time{}, "svc", e, true, waits.Resend{}); err != nil {
			t.Fatal(err)
		}
		if nc.NumSubscriptions() != before+replySubs {
			t.Fatalf("%d subscriptions, want %d", nc.NumSubscriptions(), before+replySubs)
		}
	}()
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		runtime.GC()
		if n := nc.NumSubscriptions(); n != before {
			return fmt.Errorf("%d subscriptions, want %d", n, before)
		}
		return nil
	})
}

// TestClientLetGoMidRequest: a Client let go while a request of its own
// is under way (client.New(nc, cfg).Tasks().Wait(...), or a caller whose
// last use of the Client is that call) is collected, and the request
// still gets its reply: the reply subscription is kept until the request
// ends. Before, the Client's cleanup unsubscribed it under the request,
// which then got no reply until its context ended (the load flake of the
// embedded TestTaskSurvivesRouterRestart).
func TestClientLetGoMidRequest(t *testing.T) {
	s := testkit.RunServer(t)
	nc, srv := testkit.Connect(t, s), testkit.Connect(t, s)
	held := make(chan *nats.Msg, 1)
	if _, err := srv.Subscribe(bus.NewSubjects("").Tasks("s1"), func(m *nats.Msg) { held <- m }); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	before := nc.NumSubscriptions()
	collected := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- waitOnce(t.Context(), nc, collected) }()
	m := testkit.Recv(t, held, 10*time.Second, "the wait's request")
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		runtime.GC()
		select {
		case <-collected:
			return nil
		default:
			return errors.New("the Client is not collected")
		}
	})
	if n := nc.NumSubscriptions(); n != before+replySubs {
		t.Fatalf("%d subscriptions while the request waits, want %d", n, before+replySubs)
	}
	e, err := bus.NewEvent(bus.TypeTaskReply, "test/router", bus.TaskReply{Tasks: []bus.Task{{ID: "t1", State: bus.StateSuccess}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(srv, m.Reply, e); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, done, 10*time.Second, "the wait's end"); err != nil {
		t.Fatalf("the wait of a Client let go: %v", err)
	}
	// Once the request ended, nothing holds the reply subscription.
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		runtime.GC()
		if n := nc.NumSubscriptions(); n != before {
			return fmt.Errorf("%d subscriptions, want %d", n, before)
		}
		return nil
	})
}

// waitOnce makes a Client whose last use is one wait on task t1 of
// session s1; collected is closed once the Client is collected.
//
//go:noinline
func waitOnce(ctx context.Context, nc *nats.Conn, collected chan struct{}) error {
	c := New(nc, Config{})
	runtime.AddCleanup(c, func(ch chan struct{}) { close(ch) }, collected)
	got, err := c.Tasks().Wait(ctx, "s1", time.Minute, "t1")
	if err == nil && (len(got) != 1 || got[0].State != bus.StateSuccess) {
		err = fmt.Errorf("wait: %+v", got)
	}
	return err
}
