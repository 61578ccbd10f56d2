package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// The reply inboxes against a server: each case answers the requests
// its own way and checks what request returns, and that the inbox is
// kept for the next request or let go.
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
			r := newReplies(nc)
			e, err := bus.NewEvent(bus.TypeAdmin, "test", struct{}{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 { // the inbox serves the next request too
				ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
				m, err := r.request(ctx, "svc", e, false)
				cancel()
				if !errors.Is(err, tc.err) || err == nil && string(m.Data) != tc.want {
					t.Fatalf("request %d: %v, %v; want %q, %v", i, m, err, tc.want, tc.err)
				}
				if len(r.idle) != 1 {
					t.Fatalf("request %d: %d inboxes kept, want 1", i, len(r.idle))
				}
				// (r.idle is read without the lock: no request is under way.)
			}
		})
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
	r := newReplies(nc)
	e, _ := bus.NewEvent(bus.TypeAdmin, "test", struct{}{})
	done := make(chan error, 1)
	go func() {
		_, err := r.request(t.Context(), "svc", e, false)
		done <- err
	}()
	testkit.Recv(t, got, 5*time.Second, "the request")
	nc.Close()
	if err := testkit.Recv(t, done, 5*time.Second, "the request's end"); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("request on a closed connection: %v", err)
	}
	if _, err := r.request(t.Context(), "svc", e, false); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("request after close: %v", err)
	}
}

// TestRepliesKeepsAtMost: inboxes past maxIdleInboxes are unsubscribed.
func TestRepliesKeepsAtMost(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	r := newReplies(nc)
	var ins []*inbox
	for range maxIdleInboxes + 2 {
		in, err := r.get()
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	for _, in := range ins {
		r.put(in)
	}
	if len(r.idle) != maxIdleInboxes || ins[len(ins)-1].sub.IsValid() || !ins[0].sub.IsValid() {
		t.Fatalf("%d kept; last valid %v, first %v", len(r.idle), ins[len(ins)-1].sub.IsValid(), ins[0].sub.IsValid())
	}
	testkit.Recv(t, ins[len(ins)-1].gone, time.Second, "the unsubscribed inbox's end")
}

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
		if _, err := c.rq.replies.request(t.Context(), "svc", e, true); err != nil {
			t.Fatal(err)
		}
		if nc.NumSubscriptions() != before+1 {
			t.Fatalf("%d subscriptions, want %d", nc.NumSubscriptions(), before+1)
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
