package client

import (
	"context"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// replies sends the Client's requests with reply subjects of its own: an
// inbox, a subscription on <inbox>.* whose messages go to a channel the
// requester waits on, serves one request at a time and is kept for the
// next (at most maxIdleInboxes of them). A reply then reaches the caller's
// goroutine straight from the connection's reader; nats.go's request
// multiplexer hands it through a goroutine of its own first, and makes a
// channel, a map entry and a token per request.
//
// Each request's reply subject is <inbox>.<n>, n counting the inbox's
// requests: a reply that comes after its request gave up (its context
// ended) is told apart from the next request's and dropped.
//
// A Client that is let go without Close (one made by New on a connection
// that lives on) has its idle inboxes unsubscribed once the collector
// finds it unreachable (New's runtime.AddCleanup calls close).
type replies struct {
	nc *nats.Conn

	mu     sync.Mutex
	idle   []*inbox
	closed bool
}

// maxIdleInboxes bounds the inboxes kept between requests: as many as
// requests were under way at once, up to this many.
const maxIdleInboxes = 1024

func newReplies(nc *nats.Conn) *replies { return &replies{nc: nc} }

type inbox struct {
	sub    *nats.Subscription
	msgs   chan *nats.Msg
	gone   chan struct{} // closed when the subscription ends (the connection closed)
	prefix string        // the inbox subject and a dot
	n      uint64        // requests sent through it
	closed sync.Once
}

// inboxBuffer is each inbox's channel: a reply, and late ones that
// arrive before the next request reads them. Past it the connection drops
// a message as a slow consumer's, which a late one may well be.
const inboxBuffer = 8

func (r *replies) get() (*inbox, error) {
	r.mu.Lock()
	if n := len(r.idle); n > 0 {
		in := r.idle[n-1]
		r.idle[n-1] = nil
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return in, nil
	}
	r.mu.Unlock()
	in := &inbox{prefix: r.nc.NewInbox() + ".", msgs: make(chan *nats.Msg, inboxBuffer), gone: make(chan struct{})}
	// No flush: the server reads the subscription before the request
	// that follows it on the same connection.
	sub, err := r.nc.ChanSubscribe(in.prefix+"*", in.msgs)
	if err != nil {
		return nil, err
	}
	sub.SetClosedHandler(func(string) { in.closed.Do(func() { close(in.gone) }) })
	in.sub = sub
	return in, nil
}

// put keeps in for another request, or unsubscribes it when enough are kept.
func (r *replies) put(in *inbox) {
	r.mu.Lock()
	if len(r.idle) < maxIdleInboxes && !r.closed {
		r.idle = append(r.idle, in)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	_ = in.sub.Unsubscribe()
}

// close unsubscribes the idle inboxes, and those put back later.
func (r *replies) close() {
	r.mu.Lock()
	idle := r.idle
	r.idle, r.closed = nil, true
	r.mu.Unlock()
	for _, in := range idle {
		_ = in.sub.Unsubscribe()
	}
}

// request sends e to subject and waits for the reply until ctx ends, as
// nats.Conn.RequestMsgWithContext does (the same errors: ctx's,
// nats.ErrNoResponders, nats.ErrConnectionClosed). e's data is checked
// to be JSON unless trusted (bus.SendTrusted).
func (r *replies) request(ctx context.Context, subject string, e *bus.Event, trusted bool) (*nats.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	in, err := r.get()
	if err != nil {
		return nil, err
	}
	in.n++
	reply := in.prefix + strconv.FormatUint(in.n, 36)
	publish := func(m *nats.Msg) error {
		m.Reply = reply
		return r.nc.PublishMsg(m)
	}
	if trusted {
		err = bus.SendTrusted(subject, e, "", publish)
	} else {
		err = bus.SendWith(subject, e, "", publish)
	}
	if err != nil {
		r.put(in)
		return nil, err
	}
	for {
		select {
		case m := <-in.msgs:
			if m.Subject != reply {
				continue // the late reply of an earlier request
			}
			r.put(in)
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return nil, nats.ErrNoResponders
			}
			return m, nil
		case <-in.gone:
			if r.nc.IsClosed() {
				return nil, nats.ErrConnectionClosed
			}
			return nil, nats.ErrDisconnected
		case <-ctx.Done():
			r.put(in) // a reply that still comes is dropped as late
			return nil, ctx.Err()
		}
	}
}
