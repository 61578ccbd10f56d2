package client

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// Bounds of the follower's relayed pulls: messages per pull, its wait, and
// the grace for the closing status without heartbeats (1.8 and older).
const (
	followBatch = 256
	followWait  = 5 * time.Second
	followGrace = 10 * time.Second
)

// Heartbeats (docs/protocol.md 3.4): a pull that brings nothing within
// followQuiet is sent again, followSilences times before a new consumer.
const (
	followBeat     = time.Second
	followQuiet    = 2 * followBeat
	followSilences = 3
)

// follower reads a router-made consumer (docs/protocol.md 3.4, 6.2) through
// its router's verbs, asking for another from the next sequence when it is
// lost. Each pull has its own reply subject <inbox>.<n>, so that an earlier
// pull's closing status never ends a newer one.
type follower struct {
	c        *Client
	subject  string // P.replay.<session> or P.handoff.<kind>[.<tool>]
	session  string // the requests' sessionid ("" for handoff)
	create   string // the type that asks for a consumer
	ready    string // its reply's type
	deliver  func(*nats.Msg) bool
	next     uint64 // the stream sequence wanted next
	consumer string
	beats    bool               // the consumer's router honours heartbeat_ms (its ready said so, 1.9)
	inbox    string             // the pulls' reply subjects are <inbox>.<n>
	sub      *nats.Subscription // on <inbox>.*, for one consumer's life
	pulls    int                // pulls sent: the last reply subject's <n>
	silent   int                // pulls in a row that brought nothing
}

// open asks a router for a consumer from f.next.
func (f *follower) open(ctx context.Context) error {
	if f.sub == nil {
		f.inbox = f.c.nc.NewInbox()
		sub, err := f.c.nc.SubscribeSync(f.inbox + ".*")
		if err != nil {
			return err
		}
		f.sub = sub
	}
	var ready bus.ReplayReady
	if err := f.c.rq.ask(ctx, f.subject, f.create, f.session, bus.Replay{StartSeq: f.next}, f.ready, &ready, 10*time.Second); err != nil {
		return err
	}
	f.consumer, f.beats, f.silent = ready.Consumer, ready.Heartbeat, 0
	return nil
}

// run follows the consumer until ctx ends, then stops it.
func (f *follower) run(ctx context.Context) {
	defer f.stop()
	for ctx.Err() == nil {
		if f.consumer == "" {
			if err := f.open(ctx); err != nil {
				_ = bus.Sleep(ctx, time.Second)
				continue
			}
		}
		switch err := f.pull(ctx); {
		case errors.Is(err, errSilent):
			f.stop() // it may live on, answering no one: the server drops it once idle anyway
		case err != nil:
			f.drop() // lost (a node's loss, its idle time): ask again from f.next
		}
	}
}

// errLost: the consumer is gone; errSilent: its pulls went unanswered.
var (
	errLost   = errors.New("client: consumer lost")
	errSilent = errors.New("client: consumer does not answer")
)

// pull relays one pull and delivers what comes until its closing status, a
// full batch, silence or ctx's end; errLost or errSilent ask for a new one.
func (f *follower) pull(ctx context.Context) error {
	f.pulls++
	reply := f.inbox + "." + strconv.Itoa(f.pulls)
	q := bus.ConsumerNext{Consumer: f.consumer, Batch: followBatch, ExpiresMS: followWait.Milliseconds()}
	quiet := followWait + followGrace
	if f.beats {
		q.HeartbeatMS, quiet = followBeat.Milliseconds(), followQuiet
	}
	e, err := f.c.rq.event(bus.TypeConsumerNext, f.session, q)
	if err != nil {
		return err
	}
	publish := func(m *nats.Msg) error {
		m.Reply = reply
		return f.c.nc.PublishMsg(m)
	}
	if err := bus.SendWith(f.subject, e, "", publish); err != nil {
		return err
	}
	deadline := time.Now().Add(quiet)
	for got := 0; got < followBatch; {
		m, err := f.recv(ctx, deadline)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			return f.quiet()
		case err != nil:
			return errLost // the subscription or the connection is closed
		}
		f.silent, deadline = 0, time.Now().Add(quiet) // the consumer answers
		switch status := m.Header.Get("Status"); {
		case status == "100": // a heartbeat
		case status != "" || strings.HasPrefix(m.Subject, f.inbox+".") && refusal(m):
			if m.Subject != reply {
				continue // an earlier pull's end or refusal: this one goes on
			}
			if status == "404" || status == "408" {
				return nil // no more now, or the wait ended: pull again
			}
			return errLost // 409 consumer deleted, 503 no responders, the router's refusal ...
		default: // a stored message, or a request the router relays (6.2)
			got++
			if seq, ok := seqOf(m); ok { // two routers' relays may come out of order
				f.next = max(f.next, seq+1)
			}
			if !f.deliver(m) {
				return nil
			}
		}
	}
	return nil
}

// recv is the next message on the pulls' inbox, until deadline.
func (f *follower) recv(ctx context.Context, deadline time.Time) (*nats.Msg, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return f.sub.NextMsgWithContext(ctx)
}

// quiet is what a pull that brought nothing means: with heartbeats, a pull
// lost (up to followSilences); without, the consumer lost.
func (f *follower) quiet() error {
	if !f.beats {
		return errLost
	}
	if f.silent++; f.silent >= followSilences {
		return errSilent
	}
	return nil
}

// drop forgets the consumer and its inbox; the next starts from f.next.
func (f *follower) drop() {
	f.consumer = ""
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
		f.sub = nil
	}
}

// stop asks the router to delete the consumer, and drops it.
func (f *follower) stop() {
	if f.consumer != "" {
		if e, err := f.c.rq.event(bus.TypeConsumerStop, f.session, bus.ConsumerStop{Consumer: f.consumer}); err == nil {
			_ = bus.Publish(f.c.nc, f.subject, e)
			_ = f.c.nc.Flush()
		}
	}
	f.drop()
}

// seqOf is the stream sequence of a message a pull delivered: from its
// reply subject, or its Nats-Sequence header when a router relayed it (6.2).
func seqOf(m *nats.Msg) (uint64, bool) {
	if seq, ok := streamSeq(m.Reply); ok {
		return seq, true
	}
	n, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	return n, err == nil && n > 0
}

// streamSeq is the stream sequence of a JetStream message's reply subject
// ($JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>,
// or with a domain and account hash before the stream).
func streamSeq(reply string) (uint64, bool) {
	t := strings.Split(reply, ".")
	if len(t) < 9 || t[0] != "$JS" || t[1] != "ACK" {
		return 0, false
	}
	i := 5
	if len(t) > 9 {
		i = 7 // $JS.ACK.<domain>.<account hash>.<stream>...
	}
	n, err := strconv.ParseUint(t[i], 10, 64)
	return n, err == nil
}

// refusal reports whether m, on a pull's own inbox, is the router's refusal
// rather than a handoff request it relays there (6.2).
func refusal(m *nats.Msg) bool {
	e, err := bus.Decode(m)
	return err != nil || e.Type == bus.TypeError
}

// start asks for the follower's consumer and follows it.
func (f *follower) start(ctx context.Context) (*Events, error) {
	ctx, ev := newEvents(ctx)
	f.deliver = func(m *nats.Msg) bool { return ev.send(ctx, m) }
	if err := f.open(ctx); err != nil {
		f.drop()
		ev.stop()
		return nil, err
	}
	go func() {
		f.run(ctx)
		ev.end()
	}()
	return ev, nil
}
