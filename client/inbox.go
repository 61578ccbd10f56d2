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
	return r.mux.Request(ctx, func(inbox string) error {
		publish := func(m *nats.Msg) error {
			m.Reply = inbox
			return r.mux.Conn().PublishMsg(m)
		}
		if trusted {
			return bus.SendTrusted(subject, e, "", publish)
		}
		return bus.SendWith(subject, e, "", publish)
	})
}
