package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/replies"
)

// Publisher defaults.
const (
	// DefaultMaxPending is PublisherConfig.MaxPending's default.
	DefaultMaxPending = 4096
	// DefaultAckWait is PublisherConfig.AckWait's default.
	DefaultAckWait = 5 * time.Second
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// MaxPending bounds the messages published and not yet acknowledged;
	// a publisher past it waits a moment, then its message is refused at
	// once and Stored publishes it again. Zero means DefaultMaxPending.
	MaxPending int
	// AckWait is how long an acknowledgement is awaited before the message
	// is published again (one lost in a leader change never arrives). Zero
	// means DefaultAckWait.
	AckWait time.Duration
	// MaxWait bounds each Stored, retries included; zero means the
	// caller's context alone bounds it.
	MaxWait time.Duration
	// Health, when set, notes each message's outcome in Stored.
	Health *Health
	// OwnAcks: the first publish of each message is awaited on the
	// publisher's own reply subscription, not through jetstream's
	// asynchronous publish (ownacks.go); Pending.Ack is then nil.
	OwnAcks bool
}

// Publisher publishes messages to a stream asynchronously, each with a
// message id the stream stores once, and Stored waits until the stream
// holds them: one wait per batch of messages. Safe for concurrent use.
type Publisher struct {
	js  jetstream.JetStream
	cfg PublisherConfig
	own *replies.Mux // OwnAcks: the replies to first publishes (ownacks.go)
}

// NewPublisher returns a Publisher through a JetStream context of its own
// on nc, whose asynchronous acknowledgements time out after AckWait.
func NewPublisher(nc *nats.Conn, cfg PublisherConfig) (*Publisher, error) {
	cfg.MaxPending, cfg.AckWait = positive(cfg.MaxPending, DefaultMaxPending), positive(cfg.AckWait, DefaultAckWait)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending), jetstream.WithPublishAsyncTimeout(cfg.AckWait))
	if err != nil {
		return nil, fmt.Errorf("store: publisher: %w", err)
	}
	p := &Publisher{js: js, cfg: cfg}
	if cfg.OwnAcks {
		p.own = replies.New(nc, replies.Options{Reset: true, KeepInbox: true})
	}
	return p, nil
}

// JetStream is the publisher's JetStream context (for provisioning the
// stream it writes to).
func (p *Publisher) JetStream() jetstream.JetStream { return p.js }

// Pending is a message on its way to the stream.
type Pending struct {
	msg     *nats.Msg
	id      string
	ack     jetstream.PubAckFuture
	err     error
	acked   bool // the ack was taken (its channel holds it once)
	retried bool // Stored published it again
	ackWait time.Duration
	own     *replies.Wait // OwnAcks: the wait for the first publish's reply, until it ends (ownacks.go)
	pub     *Publisher    // set with own, and kept
}

// ID is the message id.
func (p *Pending) ID() string { return p.id }

// Msg is the message as published.
func (p *Pending) Msg() *nats.Msg { return p.msg }

// Data is the message's payload.
func (p *Pending) Data() []byte { return p.msg.Data }

// Err is why the message is not stored (after Stored), or nil.
func (p *Pending) Err() error { return p.err }

// Retried reports whether Stored published the message again.
func (p *Pending) Retried() bool { return p.retried }

// Ack is the first publish's acknowledgement future; nil when that
// publish failed at once (Err says why) or, with OwnAcks, was awaited on
// the publisher's own subscription.
func (p *Pending) Ack() jetstream.PubAckFuture { return p.ack }

// Publish sends m with message id id and returns at once; Stored waits
// for it. A publish that fails at once is retried by Stored.
func (p *Publisher) Publish(m *nats.Msg, id string) *Pending {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	if v := m.Header[jetstream.MsgIDHeader]; len(v) != 1 || v[0] != id { // bus.Event.StoredMsg sets it
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	x := &Pending{msg: m, id: id, ackWait: p.cfg.AckWait}
	if p.own != nil {
		p.publishOwn(m, x)
		return x
	}
	x.ack, x.err = p.js.PublishMsgAsync(m)
	return x
}

// Settled waits, until ctx ends, for the acknowledgements of ps as the
// first round of Stored does, and reports whether the stream holds every
// one; what failed or is still awaited is left for Stored. So a caller
// makes a context for Stored only when something is left.
func Settled(ctx context.Context, ps []*Pending) bool {
	for _, x := range ps {
		if x == nil || x.ack == nil && x.err == nil && x.pub == nil { // not a Publisher's
			return false
		}
	}
	if len(ps) == 0 {
		return true
	}
	failed := awaitAll(ctx, ps, ps[0].ackWait)
	for _, x := range failed {
		if ctx.Err() != nil && x.err == ctx.Err() {
			x.err = nil
		}
	}
	return len(failed) == 0
}

// Stored waits until the stream holds every message of ps, publishing
// again (same message id) those whose publish failed or whose
// acknowledgement did not come within AckWait, until ctx ends or MaxWait
// has passed; not through a full store, an error that is not transient
// (retried), or a closed connection (nats.ErrConnectionClosed). A round's
// messages share one AckWait. It returns the messages it could not store,
// each with its Err.
func (p *Publisher) Stored(ctx context.Context, ps []*Pending) (lost []*Pending) {
	if p.cfg.MaxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.MaxWait)
		defer cancel()
	}
	if p.cfg.Health != nil { // each message's outcome
		defer func() {
			for _, x := range ps {
				if x != nil {
					p.cfg.Health.Note(x.err)
				}
			}
		}()
	}
	todo := make([]*Pending, 0, len(ps))
	for _, x := range ps {
		if x != nil && !x.acked {
			todo = append(todo, x)
		}
	}
	backoff := 10 * time.Millisecond
	for len(todo) > 0 {
		again := todo[:0:0]
		for _, x := range awaitAll(ctx, todo, p.cfg.AckWait) {
			if ctx.Err() != nil || !retried(x.err) {
				lost = append(lost, x)
			} else {
				again = append(again, x)
			}
		}
		if len(again) == 0 {
			break
		}
		if p.js.Conn().IsClosed() { // jetstream's error after a close wraps none: it looks transient
			for _, x := range again {
				x.err = nats.ErrConnectionClosed
			}
			return append(lost, again...)
		}
		if bus.Sleep(ctx, backoff) != nil {
			return append(lost, again...)
		}
		backoff = min(2*backoff, time.Second)
		for _, x := range again {
			x.retried = true
			x.ack, x.err = p.js.PublishMsgAsync(x.msg)
		}
		todo = again
	}
	return lost
}

// codeInProcess is JetStream's "duplicate message id is in process": an
// earlier publish of the message is proposed, not stored yet; asked again
// later, the stream answers it stored or stores this one.
const codeInProcess = 10158

// retried reports whether Stored publishes a message that failed with err
// again: a transient error or one still in process, not a full store.
func retried(err error) bool {
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok && apiErr.ErrorCode == codeInProcess {
		return true
	}
	return !IsFull(err) && IsTransient(err)
}

// awaitAll waits for the acknowledgements of ps not taken yet for at most
// ackWait in all, and returns those that failed, each with its err set.
func awaitAll(ctx context.Context, ps []*Pending, ackWait time.Duration) (failed []*Pending) {
	timer := replies.StartTimer(ackWait)
	defer replies.StopTimer(timer)
	expired := false
	for _, x := range ps {
		if x == nil || x.acked {
			continue
		}
		if x.err == nil {
			expired, x.err = x.wait(ctx, timer.C, expired)
			x.acked = x.err == nil
		}
		if x.err != nil {
			failed = append(failed, x)
		}
	}
	return failed
}

// wait waits for x's acknowledgement until expiry fires (or fired:
// expired), or ctx ends.
func (x *Pending) wait(ctx context.Context, expiry <-chan time.Time, expired bool) (bool, error) {
	if x.own != nil {
		ok, exp, err := x.waitOwn(ctx, expiry, expired)
		if ok {
			return exp, err
		}
		expired = exp // gone to jetstream: wait for its future
	}
	if !expired {
		select {
		case <-x.ack.Ok():
			return false, nil
		case err := <-x.ack.Err():
			return false, err
		case <-ctx.Done():
			return false, ctx.Err()
		case <-expiry:
		}
	}
	select { // expired: only an answer that has come
	case <-x.ack.Ok():
		return true, nil
	case err := <-x.ack.Err():
		return true, err
	default:
		return true, jetstream.ErrAsyncPublishTimeout
	}
}

// Flush waits until every message published so far is acknowledged, or
// ctx ends (the asynchronous publishes only: Stored is what retries).
func (p *Publisher) Flush(ctx context.Context) error {
	if p.own != nil {
		if err := p.own.Flush(ctx); err != nil {
			return err
		}
	}
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
