package router

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	fastjson "github.com/goccy/go-json"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/store"
)

// routerEvents is the eventPort: session events through JetStream
// (store.Publisher: sent once the stream acknowledged them, one wait per
// batch, retried under the same id), replies on core NATS.
type routerEvents struct {
	*wire
	pub *store.Publisher
}

func newRouterEvents(w *wire, health *store.Health) (*routerEvents, error) {
	pub, err := store.NewPublisher(w.nc, store.PublisherConfig{Health: health, OwnAcks: true})
	if err != nil {
		return nil, fmt.Errorf("router: events: %w", err)
	}
	return &routerEvents{wire: w, pub: pub}, nil
}

// sentEvent is an event on its way to the stream.
type sentEvent = store.Pending

func (x *routerEvents) publish(id, typ, session, replyID, callID string, trace [2]string, data any) (*sentEvent, error) {
	var e bus.Event
	if err := routerEventTo(&e, x.source, typ, session, replyID, callID, trace, data); err != nil {
		return nil, err
	}
	e.ID = cmp.Or(id, e.ID)
	m, err := e.StoredMsg(x.subj.EventsMsg(session)) // its Nats-Msg-Id the event's id
	if err != nil {
		return nil, err
	}
	return x.pub.Publish(m, e.ID), nil
}

// stored waits until the stream holds every event of evs, until ctx ends.
func (x *routerEvents) stored(ctx context.Context, evs []*sentEvent) error {
	lost := x.pub.Stored(ctx, evs)
	if len(lost) > 0 && ctx.Err() != nil {
		return ctx.Err()
	}
	var failed error
	for _, ev := range lost {
		x.log.Error("router: event not stored", "subject", ev.Msg().Subject, "id", ev.ID(), "err", ev.Err())
		failed = ev.Err()
	}
	return failed
}

// announce and reply send data the router made, not scanned again (bus.SendTrusted).
func (x *routerEvents) announce(typ, session, replyID, callID string, trace [2]string, data json.RawMessage) error {
	var e bus.Event
	rawEventTo(&e, x.source, typ, session, replyID, callID, trace, data)
	// No Nats-Msg-Id (1.21): published once and never again under this id,
	// it has no twin to dedupe, and each id held costs the stream's heap.
	return bus.SendTrusted(x.subj.EventsMsg(session), &e, "", x.nc.PublishMsg)
}

func (x *routerEvents) live(typ, session, replyID, callID string, trace [2]string, data any) error {
	var e bus.Event
	if err := routerEventTo(&e, x.source, typ, session, replyID, callID, trace, data); err != nil {
		return err
	}
	m, err := e.Msg(x.subj.EventsMsg(session))
	if err != nil {
		return err
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(bus.HeaderLiveOnly, bus.LiveOnly) // the events stream refuses it
	return x.nc.PublishMsg(m)
}

func (x *routerEvents) reply(subject, typ, session, replyID string, trace [2]string, data json.RawMessage) error {
	var e bus.Event // sent and let go: on the stack
	rawEventTo(&e, x.source, typ, session, replyID, "", trace, data)
	return bus.SendTrusted(subject, &e, "", x.nc.PublishMsg)
}

// reportStep reports a batch's results: call.result events, batch.done,
// the wait for the events stream, and the reply (docs/protocol.md 3.4).
type reportStep struct {
	audit    *auditTrail // the audit trail; nil when off (chain.go)
	landing  landingFunc // the router's tracked writes (nil: untracked)
	events   eventPort
	sessions sessionPort // the reply's session revision
	// maxPayload is the connection's payload limit (nil: parked lists are not fitted).
	maxPayload func() int64
	m          *metrics.Router
	log        *slog.Logger
}

// result publishes a finished call's io.toolbus.call.result when due, and counts it.
func (s reportStep) result(b *batch, c *callState, res bus.Result) {
	if ownEvent(b, res) && !b.cutOff() {
		id := ""
		if c.recorded { // the record's result: the event its router sent (docs/protocol.md 3.1, 3.4)
			id = parked.ResultID(b.session, b.replyID, c.call.ID)
		}
		s.publish(b, id, bus.TypeCallResult, c.call.ID, encoded(b, c))
	}
	if s.m == nil {
		return
	}
	tool := metrics.UnknownTool
	switch {
	case c.target.External != nil: // named by the agent
		tool = metrics.RequestTool
	case c.target.Code == "" || c.target.Code == bus.CodeInactiveTool || c.target.Code == bus.CodeUnavailable:
		tool = c.call.Name
	}
	s.m.Calls.WithLabelValues(tool, res.State).Inc()
	if !b.start.IsZero() {
		s.m.Latency.WithLabelValues(tool).Observe(metrics.Since(b.start))
	}
}

// ownEvent reports whether a result gets an io.toolbus.call.result of its
// own (docs/protocol.md 3.4); the others are carried by the reply and batch.done.
func ownEvent(b *batch, res bus.Result) bool {
	return b.data.Events == bus.EventsCalls || b.start.IsZero() || res.State == bus.StateInterrupted
}

// encoded returns c's result's JSON, encoded once for event, reply and batch.done.
func encoded(b *batch, c *callState) json.RawMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.raw == nil {
		appendEncoded(make([]byte, 0, c.result.Size()), c)
	}
	return c.raw
}

// appendEncoded appends the JSON of c's result to buf, encoding it there the
// first time and keeping that slice, capped, as c.raw (appends never write
// over it). b.mu is held.
func appendEncoded(buf []byte, c *callState) []byte {
	if c.raw != nil {
		return append(buf, c.raw...)
	}
	start := len(buf)
	out, err := c.result.AppendJSON(buf)
	if err != nil {
		in := internal(c.call, err)
		out, _ = in.AppendJSON(buf[:start])
	}
	c.raw = out[start:len(out):len(out)]
	return out
}

// done publishes batch.done and waits until the events stream holds the
// batch's events, or only announces it (unawaitedDone, docs/protocol.md 3.4).
func (s reportStep) done(b *batch) {
	b.publishing.Wait()
	if !unawaitedDone(b) {
		buf := append(resultsJSON(b, true, 2, nil), '}')
		s.publish(b, doneID(b), bus.TypeBatchDone, "", json.RawMessage(buf))
		s.stored(b)
		return
	}
	// Room for the reply's members: the announce copies the message, and
	// the reply finishes this buffer instead of encoding the results again.
	buf := append(resultsJSON(b, true, replySpare, resultsBuf(b)), '}')
	if err := s.events.announce(bus.TypeBatchDone, b.session, b.replyID, "", b.trace, buf); err != nil {
		s.log.Warn("router: event not published", "type", bus.TypeBatchDone, "session", b.session, "err", err)
	}
	if finished(b) {
		b.results = buf[:len(buf)-1]
	}
	s.audit.audited(b, s.landing)
}

// replySpare is the room a reply needs after its results.
const replySpare = 64

// finished reports whether every call of b has its result.
func finished(b *batch) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !slices.ContainsFunc(b.calls, func(c *callState) bool { return c.result == nil })
}

// doneID is the id of b's batch.done: for a batch that parked, its
// continuation's, the same from every router that finishes it, so the
// stream stores it once (docs/protocol.md 3.4, 6.1); else a new one.
func doneID(b *batch) string {
	if b.cont == nil {
		return ""
	}
	return b.cont.DoneID()
}

// unawaitedDone reports whether b's batch.done is published without
// awaiting the events stream (docs/protocol.md 3.4, 1.4 and 1.15): a new
// batch that parked nothing, did not ask for per-call events, and whose
// every call is a readOnlyCall or a writtenCall (a re-send changes nothing).
func unawaitedDone(b *batch) bool {
	if b.start.IsZero() || b.cont != nil || len(b.parked) > 0 || b.data.Events == bus.EventsCalls {
		return false
	}
	return !slices.ContainsFunc(b.calls, func(c *callState) bool { return !readOnlyCall(c) && !writtenCall(c) })
}

// writtenCall: c ran a worker's tool through the ledger (core, not
// durable, not external) and its record landed before the chain returned
// (callState.landed).
func writtenCall(c *callState) bool {
	t := c.target
	if !c.landed || c.early != nil || t.Code != "" || t.Reset || t.Search || t.Skill || t.Read || t.External != nil || t.Tool == nil {
		return false
	}
	def := &t.Tool.Def
	return !def.ReadOnly && !def.Durable && !def.External
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

// reply sends io.toolbus.call.reply (docs/protocol.md 3.2).
func (s reportStep) reply(b *batch, subject string) {
	buf, pooled := b.results, b.results != nil
	if b.results = nil; buf == nil || len(b.parked) > 0 {
		buf, pooled = resultsJSON(b, false, replySpare, nil), false
	}
	buf = append(buf, `,"parked":`...)
	var pj []byte
	var err error
	if len(b.parked) == 0 {
		pj = []byte(`[]`)
	} else {
		pj, err = fastjson.Marshal(b.parked)
		if err == nil && s.maxPayload != nil && len(buf)+len(pj) > int(s.maxPayload())-parkedPageSlack {
			pj, err = fastjson.Marshal(s.parkedFit(b.parked, len(buf)))
		}
	}
	if err == nil {
		buf = append(buf, pj...)
		if rev := s.sessions.Revision(b.session); rev > 0 {
			buf = strconv.AppendUint(append(buf, `,"sessionrev":`...), rev, 10)
		}
		buf = append(buf, '}')
		err = s.events.reply(subject, bus.TypeCallReply, b.session, b.replyID, b.trace, buf)
	}
	if err != nil {
		s.log.Warn("router: reply failed", "session", b.session, "reply", b.replyID, "err", err)
	}
	if pooled {
		releaseResults(b, buf)
	}
}

// parkedFit is ps as a message holding used bytes besides lists them: past
// the max payload less parkedPageSlack, a call is listed without its input
// (input_omitted, with its input_digest), as parked.list lists one that does
// not fit its page, so the reply and call.parked are always sent (protocol 3.2, 9).
func (s reportStep) parkedFit(ps []bus.Parked, used int) []bus.Parked {
	if s.maxPayload == nil || len(ps) == 0 {
		return ps
	}
	room := int(s.maxPayload()) - parkedPageSlack - used
	if encodedLen(ps) <= room {
		return ps
	}
	out := slices.Clone(ps)
	size := len(`[]`)
	for i := range out {
		p := &out[i]
		n := encodedLen(p) + 1 // and its comma
		if size+n > room && len(p.Input) > 0 {
			p.InputDigest, p.Input, p.InputOmitted = bus.InputDigest(p.Input), nil, true
			n = encodedLen(p) + 1
		}
		size += n
	}
	return out
}

// resultsBufs are the buffers of read-only batches' results, batch.done's
// that the reply finishes; both are copied as they are published, and the
// reply is the last use (releaseResults).
var resultsBufs sync.Pool

const maxPooledResults = 64 << 10

// resultsBuf is an empty buffer from resultsBufs for b, or nil.
func resultsBuf(b *batch) []byte {
	if p, ok := resultsBufs.Get().(*[]byte); ok {
		b.resultsBox = p // Put again with it: no allocation for the pointer
		return (*p)[:0]
	}
	return nil
}

// releaseResults puts buf back once nothing of b refers to it.
func releaseResults(b *batch, buf []byte) {
	b.mu.Lock()
	for _, c := range b.calls {
		c.raw = nil
	}
	b.mu.Unlock()
	if cap(buf) > maxPooledResults {
		return
	}
	p := b.resultsBox
	if b.resultsBox = nil; p == nil {
		p = new([]byte)
	}
	*p = buf[:0]
	resultsBufs.Put(p)
}

// resultsJSON returns {"results":[...] of b's finished calls (all: every
// call) in call order, unclosed, with room for spare more bytes; in buf
// when it has the room.
func resultsJSON(b *batch, all bool, spare int, buf []byte) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	size := len(`{"results":[]`) + spare
	for _, c := range b.calls {
		switch {
		case !all && c.result == nil:
		case c.raw != nil:
			size += len(c.raw) + 1
		default:
			size += c.result.Size() + 1
		}
	}
	if cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	buf = append(buf[:0], `{"results":[`...)
	n := 0
	for _, c := range b.calls {
		if !all && c.result == nil {
			continue
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = appendEncoded(buf, c)
		n++
	}
	return append(buf, ']')
}

// publish publishes an event about b under id ("": a new one); stored waits for it.
func (s reportStep) publish(b *batch, id, typ, callID string, data any) {
	ev, err := s.events.publish(id, typ, b.session, b.replyID, callID, b.trace, data)
	if err != nil {
		s.log.Warn("router: event not published", "type", typ, "session", b.session, "err", err)
		return
	}
	b.mu.Lock()
	if b.sent == nil && b.sent1[0] == nil { // once only: stored may still hold a slice taken of it
		b.sent = b.sent1[:0]
	}
	b.sent = append(b.sent, ev)
	b.mu.Unlock()
}

// stored waits until the streams hold b's events and audit records so far.
func (s reportStep) stored(b *batch) {
	defer s.audit.audited(b, s.landing) // and its audit records, in flight beside them
	sent := take(&b.mu, &b.sent)
	if len(sent) == 0 {
		return
	}
	// Awaited in the batch's context; a landing one (which a drain's
	// deadline does not cut) only for what is left.
	if store.Settled(b.ctx, sent) {
		_ = s.events.stored(b.ctx, sent) // waits for nothing: notes the health
		return
	}
	ctx, cancel := s.landing.start(b.ctx)
	defer cancel()
	_ = s.events.stored(ctx, sent)
}

// routerEventTo makes e an event about a call or batch from source.
func routerEventTo(e *bus.Event, source, typ, session, replyID, callID string, trace [2]string, data any) error {
	rawEventTo(e, source, typ, session, replyID, callID, trace, nil)
	return e.SetData(data)
}

// rawEventTo is routerEventTo with data that is JSON already (no boxing).
func rawEventTo(e *bus.Event, source, typ, session, replyID, callID string, trace [2]string, data json.RawMessage) {
	*e = bus.Head(typ, source)
	e.Data = data
	e.SessionID, e.ReplyID, e.TraceParent, e.TraceState = session, replyID, trace[0], trace[1]
	if callID != "" {
		e.Subject, e.ToolCallID = callID, callID
	}
}
