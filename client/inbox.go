package client

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	waits "github.com/toolbus/toolbus/internal/replies"
)

// replies sends the Client's requests and waits for their replies on one
// reply subscription of its own (internal/replies, as the router's exec
// requests do): each request a new inbox under it, so a reply that comes
// after its request gave up (its context ended) goes to no wait and is
// dropped. Against nats.go's request multiplexer, a wait takes no channel
// of its own (pooled) and no timer when the context bounds it.
//
// A Client that is let go without Close (one made by New on a connection
// that lives on) has the subscription unsubscribed once the collector
// finds it unreachable (New's runtime.AddCleanup calls close).
type replies struct{ mux *waits.Mux }

func newReplies(nc *nats.Conn) *replies {
	// EndOnClose: a closed connection ends a request at once, with
	// nats.ErrConnectionClosed, as nats.go's request does.
	return &replies{mux: waits.New(nc, waits.Options{EndOnClose: true})}
}

func (r *replies) close() { r.mux.Unsubscribe() }

// request sends e to subject and waits for the reply until ctx ends, as
// nats.Conn.RequestMsgWithContext does (the same errors: ctx's,
// nats.ErrNoResponders, nats.ErrConnectionClosed). e's data is checked
// to be JSON unless trusted (bus.SendTrusted).
func (r *replies) request(ctx context.Context, subject string, e *bus.Event, trusted bool) (*nats.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := r.mux.Await(0)
	if err != nil {
		return nil, err
	}
	publish := func(m *nats.Msg) error {
		m.Reply = w.Inbox()
		return r.mux.Conn().PublishMsg(m)
	}
	if trusted {
		err = bus.SendTrusted(subject, e, "", publish)
	} else {
		err = bus.SendWith(subject, e, "", publish)
	}
	if err != nil {
		r.mux.Done(w, false)
		return nil, err
	}
	m := w.Wait(ctx, 0)
	r.mux.Done(w, m != nil)
	switch {
	case m != nil && len(m.Data) == 0 && m.Header.Get("Status") == "503":
		return nil, nats.ErrNoResponders
	case m != nil:
		return m, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case r.mux.Conn().IsClosed():
		return nil, nats.ErrConnectionClosed
	}
	return nil, nats.ErrDisconnected
}
