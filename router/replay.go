package router

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/parked"
)

// replayIdle is how long a replay consumer lives once nobody pulls from it.
const replayIdle = 30 * time.Second

// Bounds on replay consumers per session within replayIdle and on the
// stream (docs/protocol.md 3.4); past either, limit_exceeded.
const (
	maxSessionReplays = 8
	maxReplays        = 1024
	// maxUnboundReplays bounds sessions without their own agent user, which
	// the shared agent may make up, below bound ones' (issue 26).
	maxUnboundReplays = 768
)

// defaultBatch is a relayed pull's batch when the request names none.
const defaultBatch = 64

// jsAPI is the JetStream API prefix the router's relayed pulls go to.
const jsAPI = "$JS.API."

// maxChecking bounds one session's pulls and stops a router checks at once
// (each a JetStream API request; session 26, red team: one session's flood
// held every other session's replays): a follower pulls once at a time per
// consumer, and a session has at most maxSessionReplays of them.
const maxChecking = 2 * maxSessionReplays

// replayLimit counts the replay consumers made per session within
// replayIdle, and the pulls and stops being checked.
type replayLimit struct {
	mu       sync.Mutex
	made     map[string][]time.Time
	checking map[string]int
}

// check counts one more of session's pulls and stops being checked (false
// past maxChecking: not counted); done counts one fewer.
func (l *replayLimit) check(session string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.checking[session] >= maxChecking {
		return false
	}
	if l.checking == nil {
		l.checking = map[string]int{}
	}
	l.checking[session]++
	return true
}

func (l *replayLimit) done(session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.checking[session]--; l.checking[session] <= 0 {
		delete(l.checking, session)
	}
}

// take reports whether session may have another replay consumer now, counting it.
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

// replays serves the router-made pull consumers (docs/protocol.md 3.4, 6.2)
// on P.replay.<session> and P.handoff.<kind>[.<tool>], checking each pull
// and stop against the subject's filter before relaying it.
type replays struct {
	*wire
	events jetstream.Stream
	parked jetstream.Stream                 // P_parked's: the handoff is read from it
	pulls  chan struct{}                    // the handoff pulls relayed at once
	work   func(func(context.Context)) bool // runs a relayed pull as tracked work; false once draining
	limit  replayLimit
	bound  func(session string) bool // whether a session has its own agent user (nil: open router)
	heard  heard                     // consumers whose pull subject this router's server knows
}

// feed is what a request subject grants: consumers of stream on filter,
// named kind-<random>, counted under key; a create is answered with type ready.
type feed struct {
	stream              jetstream.Stream
	filter, key, kind   string
	create, ready, what string
	max                 int          // consumers on the stream past which none is made
	want                *parked.Want // the handoff's grant: the router relays only those records; nil relays the pull
}

func (r *replays) onReplay(m *nats.Msg) {
	e, err := r.decode(m, "replay", "") // serve checks the type
	if err != nil {
		r.reject(m, err)
		return
	}
	token := e.SessionID
	limit := maxUnboundReplays
	if r.bound != nil && r.bound(token) {
		limit = maxReplays
	}
	r.serve(m, e, feed{stream: r.events, filter: r.subj.Events(token), key: "replay " + token, kind: "replay",
		create: bus.TypeReplay, ready: bus.TypeReplayReady, what: "session " + token, max: limit})
}

// serve answers the three requests of a feed's subject.
func (r *replays) serve(m *nats.Msg, e *bus.Event, f feed) {
	var err error
	switch e.Type {
	case f.create:
		err = r.make(m, e, f)
	case bus.TypeConsumerNext, bus.TypeConsumerStop:
		// A session's replays only: a handoff grant's followers are many
		// handlers of a tool, whose relays maxHandoffPulls bounds.
		session := f.want == nil
		if session && !r.limit.check(f.key) {
			err = bus.Errorf(bus.CodeBusy, "%s has %d pulls and stops being checked on this router; wait for their answers", f.what, maxChecking)
			break
		}
		if e.Type == bus.TypeConsumerNext {
			err = r.next(m, e, f)
		} else {
			err = r.stop(e, f)
		}
		if session {
			r.limit.done(f.key)
		}
	default:
		err = bus.Errorf(bus.CodeBadEvent, "expected an event of type %s, %s or %s on %s, got %q", f.create, bus.TypeConsumerNext, bus.TypeConsumerStop, m.Subject, e.Type)
	}
	if err != nil {
		r.reject(m, err)
	}
}

// make creates a consumer of f from the requested start sequence.
func (r *replays) make(m *nats.Msg, e *bus.Event, f feed) error {
	var q bus.Replay // io.toolbus.handoff.follow has the same data
	if len(e.Data) > 0 {
		if err := e.DataAs(&q); err != nil {
			return err
		}
	}
	cfg := jetstream.ConsumerConfig{
		Name:              bus.NewConsumerName(f.kind),
		FilterSubject:     f.filter,
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: replayIdle,
		// As many replicas as the stream: a node's loss keeps the consumer.
		Replicas: f.stream.CachedInfo().Config.Replicas,
		Metadata: map[string]string{feedMeta: f.tag()},
	}
	if q.StartSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, q.StartSeq
	}
	if !r.limit.take(f.key, time.Now()) {
		return bus.Errorf(bus.CodeLimitExceeded, "%s asked for more than %d consumers within %v; reuse one", f.what, maxSessionReplays, replayIdle)
	}
	ctx, cancel := context.WithTimeout(r.base, 10*time.Second)
	defer cancel()
	if info, err := f.stream.Info(ctx); err == nil && info.State.Consumers >= f.max {
		return bus.Errorf(bus.CodeLimitExceeded, "the stream holds %d consumers; none is made past %d for %s until idle ones go", info.State.Consumers, f.max, f.what)
	}
	if _, err := f.stream.CreateConsumer(ctx, cfg); err != nil {
		return bus.Errorf(bus.CodeUnavailable, "consumer for %s: %v", f.what, err)
	}
	ready := bus.ReplayReady{Stream: f.stream.CachedInfo().Config.Name, Consumer: cfg.Name, Idle: replayIdle.String(), Heartbeat: true}
	r.respond(m, f.ready, ready, "consumer reply")
	return nil
}

// next relays a pull from a consumer of f to JetStream with m's reply subject.
func (r *replays) next(m *nats.Msg, e *bus.Event, f feed) error {
	var q bus.ConsumerNext
	if err := e.DataAs(&q); err != nil {
		return err
	}
	pull, err := pullOf(&q)
	if err != nil || m.Reply == "" { // no reply: nowhere to deliver
		return err
	}
	c, err := r.owned(f, q.Consumer)
	if err != nil {
		return err
	}
	subject := jsAPI + "CONSUMER.MSG.NEXT." + c.CachedInfo().Stream + "." + q.Consumer
	if !r.heard.listens(r.base, r.nc, subject) {
		return bus.Errorf(bus.CodeUnavailable, "consumer %s takes no pulls now; ask for another", q.Consumer)
	}
	if f.want != nil {
		r.relayHandoff(m, c, q, *f.want)
		return nil
	}
	body, _ := json.Marshal(pull)
	if err := r.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: m.Reply, Data: body}); err != nil {
		return bus.Errorf(bus.CodeUnavailable, "pull from %s: %v", q.Consumer, err)
	}
	return nil
}

// jsPull is JetStream's pull request (JSApiConsumerGetNextRequest).
type jsPull struct {
	Batch     int           `json:"batch"`
	Expires   time.Duration `json:"expires,omitempty"`
	NoWait    bool          `json:"no_wait,omitempty"`
	Heartbeat time.Duration `json:"idle_heartbeat,omitempty"`
}

// pullOf checks q's bounds (docs/protocol.md 3.4, docs/security.md), fills
// in its default batch and returns its JetStream pull.
func pullOf(q *bus.ConsumerNext) (jsPull, error) {
	q.Batch = cmp.Or(q.Batch, defaultBatch)
	if q.Batch < 0 || q.Batch > bus.MaxConsumerBatch || q.ExpiresMS < 0 || q.ExpiresMS > bus.MaxConsumerWaitMS {
		return jsPull{}, bus.Errorf(bus.CodeBadRequest, "batch must be 1 to %d and expires_ms 0 to %d", bus.MaxConsumerBatch, bus.MaxConsumerWaitMS)
	}
	if q.HeartbeatMS != 0 && (q.HeartbeatMS < bus.MinConsumerHeartbeatMS || 2*q.HeartbeatMS > q.ExpiresMS) {
		return jsPull{}, bus.Errorf(bus.CodeBadRequest, "heartbeat_ms must be %d to half of expires_ms (%d), or absent", bus.MinConsumerHeartbeatMS, q.ExpiresMS)
	}
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	return jsPull{Batch: q.Batch, Expires: ms(q.ExpiresMS), NoWait: q.ExpiresMS == 0, Heartbeat: ms(q.HeartbeatMS)}, nil
}

// stop deletes a consumer of f.
func (r *replays) stop(e *bus.Event, f feed) error {
	var q bus.ConsumerStop
	if err := e.DataAs(&q); err != nil {
		return err
	}
	if _, err := r.owned(f, q.Consumer); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.base, 10*time.Second)
	defer cancel()
	if err := f.stream.DeleteConsumer(ctx, q.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return bus.Errorf(bus.CodeUnavailable, "stop %s: %v", q.Consumer, err)
	}
	return nil
}

// feedMeta is the consumer metadata naming what its feed grants: the
// handoff's consumers share one filter, so kind and tool are told by it.
const feedMeta = "toolbus.feed"

// tag is what f's consumers carry under feedMeta.
func (f feed) tag() string {
	if f.want == nil {
		return f.filter
	}
	return f.want.Kind + "." + cmp.Or(f.want.Tool, "*")
}

// owned returns consumer name when f's router made it; else one refusal for all.
func (r *replays) owned(f feed, name string) (jetstream.Consumer, error) {
	refused := bus.Errorf(bus.CodeBadRequest, "no consumer %q for %s (ask for one with %s)", name, f.what, f.create)
	if !bus.ValidConsumerName(f.kind, name) {
		return nil, refused
	}
	c, err := lookup(r.base, f.stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, refused
	}
	if err != nil {
		return nil, bus.Errorf(bus.CodeUnavailable, "look up %s: %v", name, err)
	}
	cfg := c.CachedInfo().Config
	if cfg.DeliverSubject != "" || cfg.FilterSubject != f.filter || len(cfg.FilterSubjects) > 0 ||
		f.want != nil && cfg.Metadata[feedMeta] != f.tag() {
		return nil, refused
	}
	return c, nil
}

// Bounds of a consumer lookup: lookupTry per try and for a leader (asked
// every leaderPause), lookupAll in all.
const (
	lookupTry   = 2 * time.Second
	leaderPause = 100 * time.Millisecond
	lookupAll   = 10 * time.Second
)

// errLeaderless is a consumer that has had no leader for lookupTry.
var errLeaderless = errors.New("the consumer has no leader")

// lookup is stream's consumer name, looked up again while unanswered or
// leaderless (docs/protocol.md 3.4, 1.9): a relayed pull or a refusal, not silence.
func lookup(base context.Context, stream jetstream.Stream, name string) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(base, lookupAll)
	defer cancel()
	var leaderless time.Time
	for {
		try, stop := context.WithTimeout(ctx, lookupTry)
		c, err := stream.Consumer(try, name)
		stop()
		switch {
		case err == nil && led(c):
			return c, nil
		case err == nil:
			if leaderless.IsZero() {
				leaderless = time.Now()
			} else if time.Since(leaderless) >= lookupTry {
				return nil, errLeaderless
			}
			if err := bus.Sleep(ctx, leaderPause); err != nil {
				return nil, errLeaderless
			}
		case (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) && ctx.Err() == nil:
			// Unanswered: ask again.
		default:
			return nil, err
		}
	}
}

// led reports whether c has a leader, or no cluster at all.
func led(c jetstream.Consumer) bool {
	cl := c.CachedInfo().Cluster
	return cl == nil || cl.Leader != ""
}

// Bounds of the wait for a consumer's pull subject (heard.listens).
const (
	listenWait  = 2 * time.Second
	listenPause = 50 * time.Millisecond
	maxHeard    = 4096
)

// probePull is a pull request JetStream refuses (400: a heartbeat over half
// its wait) before it looks at the consumer: it changes nothing.
var probePull = []byte(`{"batch":1,"expires":1000,"idle_heartbeat":1000000}`)

// heard remembers, for replayIdle, the pull subjects this router's server
// was seen to have interest in (probePull): a pull relayed before is answered
// "no responders" to no one (docs/protocol.md 1.9). The zero value is ready.
type heard struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// listens reports whether subject has interest on nc's server, probing for
// at most listenWait; true when a probe goes unanswered (heartbeats tell).
func (h *heard) listens(base context.Context, nc *nats.Conn, subject string) bool {
	now := time.Now()
	h.mu.Lock()
	t, ok := h.seen[subject]
	h.mu.Unlock()
	if ok && now.Sub(t) < replayIdle {
		return true
	}
	ctx, cancel := context.WithTimeout(base, listenWait)
	defer cancel()
	nobody := false // a probe was answered "no responders"
	for {
		resp, err := nc.RequestWithContext(ctx, subject, probePull)
		switch {
		case err == nil && resp.Header.Get("Status") != "503":
			h.note(subject, time.Now())
			return true
		case err == nil || errors.Is(err, nats.ErrNoResponders):
			nobody = true
		default:
			// Unanswered until the end: relay (heartbeats tell), unless nobody listened.
			return !nobody
		}
		if bus.Sleep(ctx, listenPause) != nil {
			return false
		}
	}
}

// note records subject as heard at now, pruning past maxHeard.
func (h *heard) note(subject string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[string]time.Time{}
	}
	if len(h.seen) >= maxHeard {
		for s, t := range h.seen {
			if now.Sub(t) >= replayIdle {
				delete(h.seen, s)
			}
		}
	}
	if len(h.seen) < maxHeard {
		h.seen[subject] = now
	}
}

// maxHandoffPulls bounds the handoff pulls one router relays at once.
const maxHandoffPulls = 1024

// onHandoff serves the handoff (docs/protocol.md 6.2): a follower on
// P.handoff.<kind>[.<tool>] gets only the records it grants (relayHandoff).
func (r *replays) onHandoff(m *nats.Msg) {
	e, err := bus.Decode(m)
	if err != nil {
		r.reject(m, err)
		return
	}
	want, ok := r.handoffWant(m.Subject)
	if !ok || r.parked == nil {
		r.reject(m, bus.Errorf(bus.CodeBadEvent, "subject %q is not %s or %s", m.Subject, r.subj.Handoffs.Follow("{external,confirm}", ""), r.subj.Handoffs.Follow("{external,confirm}", "<tool>")))
		return
	}
	what := r.subj.Handoffs.Follow(want.Kind, want.Tool)
	bucket := strings.TrimPrefix(r.parked.CachedInfo().Config.Name, "KV_")
	r.serve(m, e, feed{stream: r.parked, filter: "$KV." + bucket + ".*.*.*", key: "handoff " + what, kind: "handoff",
		create: bus.TypeHandoffFollow, ready: bus.TypeHandoffReady, what: what, max: maxReplays, want: &want})
}

// handoffWant is what P.handoff.<kind>[.<tool>] grants.
func (r *replays) handoffWant(subject string) (parked.Want, bool) {
	rest, ok := strings.CutPrefix(subject, r.subj.Handoffs.Follow("", "")) // "P.handoff."
	if !ok {
		return parked.Want{}, false
	}
	kind, tool, hasTool := strings.Cut(rest, ".")
	if hasTool && !bus.ValidName(tool) || kind != bus.KindExternal && kind != bus.KindConfirm {
		return parked.Want{}, false
	}
	return parked.Want{Kind: kind, Tool: tool}, true
}

// relayHandoff relays one pull of consumer c to m's reply subject as
// JetStream would: the records want grants, then a closing status.
func (r *replays) relayHandoff(m *nats.Msg, c jetstream.Consumer, q bus.ConsumerNext, want parked.Want) {
	select {
	case r.pulls <- struct{}{}:
	default:
		r.reject(m, bus.Errorf(bus.CodeLimitExceeded, "this router relays %d handoff pulls at once; pull again", maxHandoffPulls))
		return
	}
	relay := func(ctx context.Context) {
		defer func() { <-r.pulls }()
		if status := r.fetchHandoff(ctx, m.Reply, c, q, want); status != "" {
			_ = r.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{"Status": {status}}})
		}
	}
	if !r.work(relay) { // the router drains: the follower asks another
		<-r.pulls
		_ = r.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{"Status": {"409"}}})
	}
}

// minHandoffWait is the shortest wait of a relay's fetch (less ends the
// pull); handoffSlice the longest, so a drain ends a relay within it.
const (
	minHandoffWait = 10 * time.Millisecond
	handoffSlice   = time.Second
)

// fetchHandoff relays the requests of one pull, fetching (past what want
// does not grant) until its batch went out ("") or a closing status.
func (r *replays) fetchHandoff(ctx context.Context, reply string, c jetstream.Consumer, q bus.ConsumerNext, want parked.Want) string {
	deadline := time.Now().Add(time.Duration(q.ExpiresMS) * time.Millisecond)
	slice, beat := handoffSlice, time.Duration(q.HeartbeatMS)*time.Millisecond
	if beat > 0 {
		slice = min(slice, beat) // a heartbeat after each slice that sent nothing
	}
	for sent := 0; sent < q.Batch; {
		if ctx.Err() != nil {
			return "409" // drained: the follower asks another router
		}
		ask := q.Batch - sent
		var (
			batch jetstream.MessageBatch
			err   error
		)
		if q.ExpiresMS == 0 {
			batch, err = c.FetchNoWait(ask)
		} else {
			left := time.Until(deadline)
			if left < minHandoffWait {
				return "408"
			}
			batch, err = c.Fetch(ask, jetstream.FetchMaxWait(min(left, slice)))
		}
		if err != nil {
			return "409"
		}
		before := sent
		got, lost := 0, false
		for msg := range batch.Messages() {
			got++
			if ctx.Err() != nil || lost {
				continue // drained: the fetch ends on its own
			}
			out, ok := parked.Request(msg.Data(), want, r.subj, r.source)
			if !ok {
				continue
			}
			if md, err := msg.Metadata(); err == nil {
				out.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(md.Sequence.Stream, 10))
			}
			out.Subject = reply
			if err := r.nc.PublishMsg(out); err != nil {
				lost = true
			}
			sent++
		}
		switch err := batch.Error(); {
		case ctx.Err() != nil || lost || err != nil && !errors.Is(err, nats.ErrTimeout):
			return "409"
		case got < ask && q.ExpiresMS == 0:
			return "404"
		} // fewer than asked with a wait: the next fetch waits for what is left of it
		if beat > 0 && sent == before && time.Until(deadline) >= minHandoffWait {
			// An idle heartbeat, as JetStream's (protocol 6.2, 1.9): the pull is alive.
			_ = r.nc.PublishMsg(&nats.Msg{Subject: reply, Header: nats.Header{"Status": {"100"}, "Description": {"Idle Heartbeat"}}})
		}
	}
	return ""
}
