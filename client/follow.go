package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// Bounds of the follower's relayed pulls: how many messages one pull asks
// for, how long it waits on the server for new ones, and how much longer
// the follower waits for the server's closing status before it takes the
// consumer for lost.
const (
	followBatch = 256
	followWait  = 5 * time.Second
	followGrace = 10 * time.Second
)

// follower reads a router-made consumer (docs/protocol.md 3.4, 6.2) through
// its router's verbs on one subject: it asks for the consumer, pulls from
// it with io.toolbus.consumer.next (the router relays each pull to
// JetStream with this follower's reply subject, so the messages come from
// the server itself), asks for another one from the next sequence when it
// is lost, and stops it at the end. The follower needs no JetStream
// permission at all.
type follower struct {
	c        *Client
	subject  string // P.replay.<session> or P.handoff.<kind>[.<tool>]
	session  string // the requests' sessionid ("" for handoff)
	create   string // the type that asks for a consumer
	ready    string // its reply's type
	deliver  func(*nats.Msg) bool
	next     uint64 // the stream sequence wanted next
	consumer string
}

// open asks a router for a consumer from f.next.
func (f *follower) open(ctx context.Context) error {
	e, err := f.c.rq.event(f.create, f.session, bus.Replay{StartSeq: f.next})
	if err != nil {
		return err
	}
	var ready bus.ReplayReady
	if err := f.c.rq.request(ctx, f.subject, e, f.ready, &ready, 10*time.Second); err != nil {
		return err
	}
	f.consumer = ready.Consumer
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
		if err := f.pull(ctx); err != nil {
			f.consumer = "" // lost (a node's loss, its idle time): ask again from f.next
		}
	}
}

// errLost says the consumer is gone or does not answer.
var errLost = errors.New("client: consumer lost")

// pull relays one pull and delivers what comes, until JetStream's closing
// status, a full batch or ctx's end. It returns errLost when the consumer
// must be asked for again.
func (f *follower) pull(ctx context.Context) error {
	inbox := f.c.nc.NewInbox()
	msgs := make(chan *nats.Msg, followBatch+4)
	sub, err := f.c.nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	e, err := f.c.rq.event(bus.TypeConsumerNext, f.session, bus.ConsumerNext{Consumer: f.consumer, Batch: followBatch, ExpiresMS: followWait.Milliseconds()})
	if err != nil {
		return err
	}
	if err := bus.Publish(replyTo{f.c.nc, inbox}, f.subject, e); err != nil {
		return err
	}
	timer := time.NewTimer(followWait + followGrace)
	defer timer.Stop()
	for got := 0; got < followBatch; {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			return errLost
		case m := <-msgs:
			switch status := m.Header.Get("Status"); {
			case status == "100": // a heartbeat
			case status == "404" || status == "408":
				return nil // no more now, or the wait ended: pull again
			case status != "":
				return errLost // 409 consumer deleted, 503 no responders, ...
			case m.Subject == inbox && refusal(m): // the router's answer: a refusal
				return errLost
			default: // a stored message, or a request the router relays (6.2)
				got++
				if seq, ok := seqOf(m); ok {
					f.next = seq + 1
				}
				if !f.deliver(m) {
					return nil
				}
			}
		}
	}
	return nil
}

// stop asks the router to delete the consumer, which the server would
// drop once idle anyway.
func (f *follower) stop() {
	if f.consumer == "" {
		return
	}
	if e, err := f.c.rq.event(bus.TypeConsumerStop, f.session, bus.ConsumerStop{Consumer: f.consumer}); err == nil {
		_ = bus.Publish(f.c.nc, f.subject, e)
		_ = f.c.nc.Flush()
	}
	f.consumer = ""
}

// seqOf is the stream sequence of a message a pull delivered: from its
// reply subject when JetStream sent it, from its Nats-Sequence header when
// the router relayed a handoff request (docs/protocol.md 6.2).
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

// refusal reports whether m, which came on the pull's own inbox, is the
// router's refusal (io.toolbus.error) rather than a handoff request the
// router relays there (docs/protocol.md 6.2, 1.6).
func refusal(m *nats.Msg) bool {
	e, err := bus.Decode(m)
	return err != nil || e.Type == bus.TypeError
}

// replyTo publishes with a reply subject.
type replyTo struct {
	nc    *nats.Conn
	reply string
}

func (p replyTo) PublishMsg(m *nats.Msg) error {
	m.Reply = p.reply
	return p.nc.PublishMsg(m)
}

// start asks for the follower's consumer and follows it, returning its
// events.
func (f *follower) start(ctx context.Context) (*Events, error) {
	ctx, cancel := context.WithCancel(ctx)
	ev := newEvents(cancel)
	ch := ev.c
	f.deliver = func(m *nats.Msg) bool {
		e, err := bus.Decode(m)
		if err != nil {
			return true
		}
		select {
		case ch <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if err := f.open(ctx); err != nil {
		cancel()
		return nil, err
	}
	go func() {
		f.run(ctx)
		ev.end()
	}()
	return ev, nil
}

// Follow streams the handoff requests (docs/protocol.md 6.2) of
// kind "external" or "confirm" for tool ("" for every tool): the calls
// still parked, oldest first, then new ones, through a pull consumer of
// P_parked's stream a router makes on request (P.handoff.<kind>[.<tool>])
// and reads for it, asked for again from the next sequence when it is
// lost. A handler or approver needs no JetStream permission
// for it.
func (p Parked) Follow(ctx context.Context, kind, tool string) (*Events, error) {
	c := p.c
	if kind != "external" && kind != "confirm" {
		return nil, bus.Errorf(bus.CodeBadRequest, "handoff kind %q is not external or confirm", kind)
	}
	if tool != "" && !bus.ValidName(tool) {
		return nil, bus.Errorf(bus.CodeBadRequest, "tool name %q must match ^[A-Za-z0-9_-]{1,64}$", tool)
	}
	f := &follower{c: c, subject: c.subj.Handoffs.Follow(kind, tool), create: bus.TypeHandoffFollow, ready: bus.TypeHandoffReady}
	ev, err := f.start(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: follow %s: %w", c.subj.Handoffs.Follow(kind, tool), err)
	}
	return ev, nil
}
