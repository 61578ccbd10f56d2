package router

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"

	fastjson "github.com/goccy/go-json"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/store"
)

// eventSink publishes session events through JetStream (store.Publisher):
// an agent that reconnects reads them from P_EVENTS, so an event counts as
// sent once the stream has acknowledged it. A batch's events cost one wait;
// a failed publish is retried with the same message id until the caller's
// context ends. Live subscribers get it whatever the stream answers.
type eventSink struct {
	pub *store.Publisher
	log *slog.Logger
}

func newEventSink(nc *nats.Conn, log *slog.Logger, health *store.Health) (*eventSink, error) {
	pub, err := store.NewPublisher(nc, store.PublisherConfig{Health: health, OwnAcks: true})
	if err != nil {
		return nil, fmt.Errorf("router: events: %w", err)
	}
	return &eventSink{pub: pub, log: log}, nil
}

// sentEvent is an event on its way to the stream.
type sentEvent = store.Pending

func (s *eventSink) publish(m *nats.Msg, id string) *sentEvent { return s.pub.Publish(m, id) }

// stored waits until the stream holds every event of evs, until ctx ends.
func (s *eventSink) stored(ctx context.Context, evs []*sentEvent) error {
	lost := s.pub.Stored(ctx, evs)
	if len(lost) > 0 && ctx.Err() != nil {
		return ctx.Err()
	}
	var failed error
	for _, ev := range lost {
		s.log.Error("router: event not stored", "subject", ev.Msg().Subject, "id", ev.ID(), "err", ev.Err())
		failed = ev.Err()
	}
	return failed
}

// reportStep reports a batch's results: each call's io.toolbus.call.result
// when it gets one (docs/protocol.md 3.4), batch.done, the wait for the
// events stream, and the reply.
type reportStep struct {
	audit    *auditTrail // the audit trail; nil when off (chain.go)
	landing  landingFunc // the router's tracked writes (nil: untracked)
	events   eventPort
	sessions sessionPort // the reply's session revision
	m        *metrics.Router
	log      *slog.Logger
}

// result publishes a finished call's io.toolbus.call.result when it gets
// one, and counts it.
func (s reportStep) result(b *batch, c *callState, res bus.Result) {
	if ownEvent(b, res) && !b.cutOff() {
		s.publish(b, bus.TypeCallResult, c.call.ID, encoded(b, c))
	}
	if s.m == nil {
		return
	}
	tool := metrics.UnknownTool
	if c.target.Code == "" || c.target.Code == bus.CodeInactiveTool || c.target.Code == bus.CodeUnavailable {
		tool = c.call.Name
	}
	s.m.Calls.WithLabelValues(tool, res.State).Inc()
	if !b.start.IsZero() {
		s.m.Latency.WithLabelValues(tool).Observe(metrics.Since(b.start))
	}
}

// ownEvent reports whether a result gets an io.toolbus.call.result of its
// own (docs/protocol.md 3.4): the batch asks for one per call, it finishes
// after the reply, or a cancel ended it. Any other result is carried by the
// reply and batch.done.
func ownEvent(b *batch, res bus.Result) bool {
	return b.data.Events == bus.EventsCalls || b.start.IsZero() || res.State == bus.StateInterrupted
}

// encoded returns the JSON of c's result, encoded once for its event, the
// reply and batch.done alike.
func encoded(b *batch, c *callState) json.RawMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.raw == nil {
		raw, err := c.result.AppendJSON(make([]byte, 0, c.result.Size()))
		if err != nil {
			in := internal(c.call, err)
			raw, _ = in.AppendJSON(nil)
		}
		c.raw = raw
	}
	return c.raw
}

// done publishes batch.done with every result in call order and waits
// until the events stream holds the batch's events; a read-only batch's is
// announced, and nothing waits (docs/protocol.md 3.4).
func (s reportStep) done(b *batch) {
	b.publishing.Wait()
	buf := append(resultsJSON(b, true, 2), '}')
	if !readOnlyBatch(b) {
		s.publish(b, bus.TypeBatchDone, "", json.RawMessage(buf))
		s.stored(b)
		return
	}
	if err := s.events.announce(bus.TypeBatchDone, b.session, b.replyID, "", b.trace, json.RawMessage(buf)); err != nil {
		s.log.Warn("router: event not published", "type", bus.TypeBatchDone, "session", b.session, "err", err)
	}
	s.audit.audited(b, s.landing)
}

// readOnlyBatch reports whether b is a new batch that parked nothing, did
// not ask for "events": "calls", and whose every call changed nothing a
// re-send would not change again (docs/protocol.md 3.4).
func readOnlyBatch(b *batch) bool {
	if b.start.IsZero() || b.cont != nil || len(b.parked) > 0 || b.data.Events == bus.EventsCalls {
		return false
	}
	for _, c := range b.calls {
		if !readOnlyCall(c) {
			return false
		}
	}
	return true
}

// readOnlyCall: c never ran, or its target writes nothing.
func readOnlyCall(c *callState) bool {
	switch t := c.target; {
	case c.early != nil, t.Code != "", t.Search:
		return true
	case t.Reset, t.External != nil, t.Tool == nil:
		return false
	}
	def := &c.target.Tool.Def
	return def.ReadOnly && !def.Durable && !def.External
}

// reply sends io.toolbus.call.reply: the finished results in call order,
// the parked calls, and the session's revision (docs/protocol.md 3.2).
func (s reportStep) reply(b *batch, subject string) {
	buf := append(resultsJSON(b, false, 64), `,"parked":`...)
	var pj []byte
	var err error
	if len(b.parked) == 0 {
		pj = []byte(`[]`)
	} else {
		pj, err = fastjson.Marshal(b.parked)
	}
	if err == nil {
		buf = append(buf, pj...)
		if rev := s.sessions.Revision(b.session); rev > 0 {
			buf = strconv.AppendUint(append(buf, `,"sessionrev":`...), rev, 10)
		}
		buf = append(buf, '}')
		var e *bus.Event
		if e, err = s.events.event(bus.TypeCallReply, b.session, b.replyID, "", b.trace, json.RawMessage(buf)); err == nil {
			err = s.events.reply(subject, e)
		}
	}
	if err != nil {
		s.log.Warn("router: reply failed", "session", b.session, "reply", b.replyID, "err", err)
	}
}

// resultsJSON returns {"results":[...] of b's finished calls (all:
// every call) in call order, unclosed, with room for spare more bytes.
func resultsJSON(b *batch, all bool, spare int) []byte {
	size := len(`{"results":[]`) + spare
	for _, c := range b.calls {
		if all || c.result != nil {
			size += len(encoded(b, c)) + 1
		}
	}
	buf := append(make([]byte, 0, size), `{"results":[`...)
	n := 0
	for _, c := range b.calls {
		if !all && c.result == nil {
			continue
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, encoded(b, c)...)
		n++
	}
	return append(buf, ']')
}

// publish publishes an event about b through the events stream; stored
// waits for it.
func (s reportStep) publish(b *batch, typ, callID string, data any) {
	ev, err := s.events.publish(typ, b.session, b.replyID, callID, b.trace, data)
	if err != nil {
		s.log.Warn("router: event not published", "type", typ, "session", b.session, "err", err)
		return
	}
	b.mu.Lock()
	b.sent = append(b.sent, ev)
	b.mu.Unlock()
}

// stored waits until the events stream holds every event b has published
// so far, and P_AUDIT its audit records.
func (s reportStep) stored(b *batch) {
	defer s.audit.audited(b, s.landing) // and its audit records, in flight beside them
	sent := take(&b.mu, &b.sent)
	if len(sent) == 0 {
		return
	}
	// The acknowledgements come while the batch is the router's tracked
	// work: they are awaited in its context, and a landing one (which a
	// drain's deadline does not cut) is made only for what is left.
	if store.Settled(b.ctx, sent) {
		_ = s.events.stored(b.ctx, sent) // waits for nothing: notes the health
		return
	}
	ctx, cancel := s.landing.start(b.ctx)
	defer cancel()
	_ = s.events.stored(ctx, sent)
}

// newRouterEvent builds an event about a call or batch from source.
func newRouterEvent(source, typ, session, replyID, callID string, trace [2]string, data any) (*bus.Event, error) {
	e := new(bus.Event)
	if err := routerEventTo(e, source, typ, session, replyID, callID, trace, data); err != nil {
		return nil, err
	}
	return e, nil
}

// routerEventTo is newRouterEvent into e: an event sent and let go stays
// on the sender's stack.
func routerEventTo(e *bus.Event, source, typ, session, replyID, callID string, trace [2]string, data any) error {
	*e = bus.Head(typ, source)
	if err := e.SetData(data); err != nil {
		return err
	}
	e.SessionID, e.ReplyID, e.TraceParent, e.TraceState = session, replyID, trace[0], trace[1]
	if callID != "" {
		e.Subject, e.ToolCallID = callID, callID
	}
	return nil
}
