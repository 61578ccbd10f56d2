package router

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
)

// replayIdle is how long a replay consumer lives once nobody pulls from it.
const replayIdle = 30 * time.Second

// onReplay makes, for the agent that asked on P.replay.<session>, a pull
// consumer of P_EVENTS filtered on that session's events, and answers its
// name (docs/protocol.md 3.4). Agents create no JetStream consumer
// themselves: nats-server checks neither a consumer's deliver_subject
// against its creator's permissions nor whether it is durable, so an agent
// allowed to create one could have the server publish its session's events
// on any subject (docs/security.md). Here the router sets the filter, pull
// mode, acks none, memory storage and an inactivity threshold.
func (r *Router) onReplay(m *nats.Msg) {
	e, err := r.decode(m, "replay", bus.TypeReplay)
	if err != nil {
		r.reject(m, err)
		return
	}
	var q bus.Replay
	if len(e.Data) > 0 {
		if err := e.DataAs(&q); err != nil {
			r.reject(m, err)
			return
		}
	}
	cfg := jetstream.ConsumerConfig{
		Name:              "replay-" + nuid.Next(),
		FilterSubject:     r.subj.Events(e.SessionID),
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: replayIdle,
		// As many replicas as the stream, so a node's loss does not
		// take the consumer with it (the client asks again if it does).
		Replicas: r.store.Events.CachedInfo().Config.Replicas,
	}
	if q.StartSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, q.StartSeq
	}
	ctx, cancel := context.WithTimeout(r.base, 10*time.Second)
	defer cancel()
	if _, err := r.store.Events.CreateConsumer(ctx, cfg); err != nil {
		r.reject(m, bus.Errorf(bus.CodeUnavailable, "replay of session %s: %v", e.SessionID, err))
		return
	}
	ready := bus.ReplayReady{Stream: r.subj.Stream(bus.StreamEvents), Consumer: cfg.Name, Idle: replayIdle.String()}
	if err := bus.Respond(r.nc, m, r.source, bus.TypeReplayReady, ready); err != nil {
		r.log.Warn("router: replay reply failed", "err", err)
	}
}
