package router

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
)

// replayIdle is how long a replay consumer lives once nobody pulls from it.
const replayIdle = 30 * time.Second

// Bounds on replay consumers: per session, what one router makes within
// replayIdle; in all, what the events stream may hold before a router
// makes no more (docs/protocol.md 3.4). Past either, limit_exceeded.
const (
	maxSessionReplays = 8
	maxReplays        = 1024
)

// replayLimit counts the replay consumers one router made per session
// within replayIdle. The zero value is ready.
type replayLimit struct {
	mu   sync.Mutex
	made map[string][]time.Time
}

// take reports whether session may have another replay consumer now, and
// counts it if so.
func (l *replayLimit) take(session string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.made == nil {
		l.made = map[string][]time.Time{}
	}
	for s, ts := range l.made { // prune: entries older than replayIdle
		ts = slices.DeleteFunc(ts, func(t time.Time) bool { return now.Sub(t) >= replayIdle })
		if len(ts) == 0 {
			delete(l.made, s)
		} else {
			l.made[s] = ts
		}
	}
	if len(l.made[session]) >= maxSessionReplays {
		return false
	}
	l.made[session] = append(l.made[session], now)
	return true
}

// onReplay makes, for the agent that asked on P.replay.<session>, a pull
// consumer of P_EVENTS filtered on that session's events, and answers its
// name (docs/protocol.md 3.4). Agents create no JetStream consumer
// themselves: nats-server checks neither a consumer's deliver_subject
// against its creator's permissions nor whether it is durable, so an agent
// allowed to create one could have the server publish its session's events
// on any subject (docs/security.md). Here the router sets the filter, pull
// mode, acks none, memory storage and an inactivity threshold.
// replays serves P.replay.<session> (docs/protocol.md 3.4): an ephemeral
// consumer over the session's events, bounded per session and in all.
type replays struct {
	*wire
	base   context.Context
	events jetstream.Stream
	limit  replayLimit
}

func (r *replays) onReplay(m *nats.Msg) {
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
		Replicas: r.events.CachedInfo().Config.Replicas,
	}
	if q.StartSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, q.StartSeq
	}
	if !r.limit.take(e.SessionID, time.Now()) {
		r.reject(m, bus.Errorf(bus.CodeLimitExceeded, "session %s asked for more than %d replays within %v; reuse one", e.SessionID, maxSessionReplays, replayIdle))
		return
	}
	ctx, cancel := context.WithTimeout(r.base, 10*time.Second)
	defer cancel()
	if info, err := r.events.Info(ctx); err == nil && info.State.Consumers >= maxReplays {
		r.reject(m, bus.Errorf(bus.CodeLimitExceeded, "the events stream holds %d consumers; no replay is made past %d until idle ones go", info.State.Consumers, maxReplays))
		return
	}
	if _, err := r.events.CreateConsumer(ctx, cfg); err != nil {
		r.reject(m, bus.Errorf(bus.CodeUnavailable, "replay of session %s: %v", e.SessionID, err))
		return
	}
	ready := bus.ReplayReady{Stream: r.subj.Stream(bus.StreamEvents), Consumer: cfg.Name, Idle: replayIdle.String()}
	r.respond(m, bus.TypeReplayReady, ready, "replay reply")
}
