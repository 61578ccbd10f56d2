package router

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/store"
)

// maxEventsInFlight bounds the events published and not yet acknowledged
// by the events stream; a router past it waits (back-pressure).
const maxEventsInFlight = 4096

// ackWait is how long an event's acknowledgement is awaited before the
// event is published again.
const ackWait = 5 * time.Second

// eventSink publishes session events through JetStream: an agent that
// reconnects reads them from P_EVENTS, so an event counts as sent only once
// the stream has acknowledged it. Publishes are asynchronous, so a batch's
// events cost one wait, not one round trip each; a publish that fails is
// retried with the same message id, which the stream stores once.
type eventSink struct {
	js     jetstream.JetStream
	log    *slog.Logger
	health *store.Health
}

func newEventSink(nc *nats.Conn, log *slog.Logger, health *store.Health) (*eventSink, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxEventsInFlight),
		jetstream.WithPublishAsyncTimeout(ackWait))
	if err != nil {
		return nil, fmt.Errorf("router: events: %w", err)
	}
	return &eventSink{js: js, log: log, health: health}, nil
}

// eventsPolicy retries an event's publish until it is stored or the
// caller's context ends, but not through a full store: the stream refuses
// it as long as nobody frees space, and the batch's reply waits for this.
// Its live subscribers got it anyway (core NATS delivers a message to
// them whatever the stream answers).
var eventsPolicy = store.Policy{}

// sentEvent is an event on its way to the stream.
type sentEvent struct {
	m   *nats.Msg
	id  string
	ack jetstream.PubAckFuture
	err error
}

// publish sends m, whose event id is id, and returns at once.
func (s *eventSink) publish(m *nats.Msg, id string) *sentEvent {
	ack, err := s.js.PublishMsgAsync(m, jetstream.WithMsgID(id))
	return &sentEvent{m: m, id: id, ack: ack, err: err}
}

// stored waits until the stream holds every event of evs, publishing again
// those whose first publish failed, until ctx ends.
func (s *eventSink) stored(ctx context.Context, evs []*sentEvent) error {
	var failed error
	for _, ev := range evs {
		if ev.err == nil {
			// An acknowledgement lost while the stream changes leader may
			// never resolve the future: it gets ackWait, then the event is
			// published again.
			t := time.NewTimer(ackWait)
			select {
			case <-ev.ack.Ok():
				t.Stop()
				s.health.Note(nil)
				continue
			case ev.err = <-ev.ack.Err():
			case <-t.C:
				ev.err = jetstream.ErrAsyncPublishTimeout
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			t.Stop()
		}
		if s.health.Note(ev.err) {
			s.log.Error("router: event not stored: store full", "subject", ev.m.Subject, "id", ev.id, "err", ev.err)
			failed = ev.err
			continue
		}
		err := store.Retry(ctx, eventsPolicy, func(ctx context.Context) error {
			_, err := s.js.PublishMsg(ctx, ev.m, jetstream.WithMsgID(ev.id))
			return err
		})
		s.health.Note(err)
		if err != nil {
			s.log.Error("router: event not stored", "subject", ev.m.Subject, "id", ev.id, "err", err)
			failed = err
		}
	}
	return failed
}
