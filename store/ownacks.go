package store

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/replies"
)

// A Publisher with OwnAcks sends a message's first publish itself, with a
// reply inbox on its own subscription (internal/replies), and reads a plain
// acknowledgement by hand (docs/store.md, "acknowledgements awaited on a
// subscription of our own"). Any other answer publishes the message again
// through jetstream's PublishMsgAsync (the stream stores a message id once),
// whose future is then awaited; no acknowledgement within the round's
// AckWait is jetstream.ErrAsyncPublishTimeout, a reconnect
// nats.ErrDisconnected, as jetstream reports them. A message with a reply
// subject, or past MaxPending own waits, goes to jetstream at once. A wait
// whose context ended keeps its registration for Stored.

// publishOwn publishes m, whose Nats-Msg-Id is set, with a reply inbox of
// the publisher's own subscription.
func (p *Publisher) publishOwn(m *nats.Msg, x *Pending) {
	var w *replies.Wait
	if m.Reply == "" {
		w, _ = p.own.Await(p.cfg.MaxPending)
	}
	if w == nil { // full, no subscription, or a reply subject jetstream refuses
		x.ack, x.err = p.js.PublishMsgAsync(m)
		return
	}
	sent := nats.Msg{Subject: m.Subject, Reply: w.Inbox(), Header: m.Header, Data: m.Data}
	if err := p.own.Conn().PublishMsg(&sent); err != nil {
		p.own.Done(w, false)
		x.err = err // as jetstream's PublishMsgAsync returns it: Stored publishes again
		return
	}
	x.own, x.pub = w, p
}

// waitOwn is wait for a message awaited on the publisher's own
// subscription. ok is false when the answer was not a plain
// acknowledgement and the message went to jetstream: x.ack is then the
// future to wait for, within the same expiry.
func (x *Pending) waitOwn(ctx context.Context, expiry <-chan time.Time, expired bool) (ok, expiredNow bool, err error) {
	w := x.own
	var m *nats.Msg
	if expired {
		select {
		case m = <-w.C():
		default:
			x.endOwn(false)
			return true, true, jetstream.ErrAsyncPublishTimeout
		}
	} else {
		select {
		case m = <-w.C():
		case <-expiry:
			x.endOwn(false)
			return true, true, jetstream.ErrAsyncPublishTimeout
		case <-ctx.Done():
			return true, false, ctx.Err() // still awaited: Stored waits on
		}
	}
	if m == nil { // the connection reconnected: the reply may yet come, to this inbox
		w.Forget()
	}
	x.endOwn(true)
	switch {
	case m == nil:
		return true, expired, nats.ErrDisconnected
	case len(m.Data) > 0:
		if _, plain := pubAckSeq(m.Data); plain {
			return true, expired, nil
		}
	}
	if x.ack, x.err = x.pub.js.PublishMsgAsync(x.msg); x.err != nil {
		return true, expired, x.err
	}
	return false, expired, nil
}

// endOwn ends the wait on the publisher's own subscription.
func (x *Pending) endOwn(replied bool) {
	x.pub.own.Done(x.own, replied)
	x.own = nil
}
