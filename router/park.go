package router

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/parked"
)

// parkStep parks the calls of a run that wait for an answer, records the
// batch's continuation, and hands the run over to it (docs/protocol.md 6.1),
// over the continuation port alone.
type parkStep struct {
	conts     continuationPort
	subj      bus.Subjects
	source    string // the parked records' owner
	maxParked int    // calls one session may have parked at once
	parked    *prometheus.CounterVec
	landing   landingFunc // the router's tracked writes (nil: untracked)
}

// park records b's continuation and parks the calls. It reports false
// when the batch was parked before (a re-sent batch): then the reply
// describes the first one's state and nothing else runs.
func (s parkStep) park(b *batch, calls []*callState, specs []parkSpec, next int) bool {
	if n := len(s.conts.Parked(b.session, "")); n+len(calls) > s.maxParked {
		// Past the session's limit nothing more parks: these calls end
		// here, and the batch goes on.
		for _, c := range calls {
			b.finish(c, bus.ErrorResult(c.call, bus.CodeLimitExceeded, fmt.Sprintf(
				"LimitExceededError: The session has %d calls waiting for an answer; at most %d may wait at once. Answer or cancel some first.", n, s.maxParked)))
		}
		return true
	}
	ctx, cancel := s.landing.start()
	defer cancel()
	waiting := make([]string, len(calls))
	for i, c := range calls {
		waiting[i] = c.call.ID
	}
	first := b.cont == nil
	if first {
		b.cont = &parked.Batch{Session: b.session, ReplyID: b.replyID, TraceParent: b.trace[0], TraceState: b.trace[1],
			Expiry: b.expiry, Data: b.data}
	}
	if err := s.conts.ParkBatch(ctx, b.cont, resultsOf(b), waiting, next); err != nil {
		if errors.Is(err, parked.ErrParkedBefore) {
			b.cont = nil
			s.adopt(ctx, b, calls, specs)
			return false
		}
		if first {
			b.cont = nil // nothing was recorded: there is no continuation to settle
		}
		for _, c := range calls {
			b.finish(c, internal(c.call, err))
		}
		return true
	}
	b.parked = b.parked[:0]
	for i, c := range calls {
		rec := &parked.Record{Session: b.session, ReplyID: b.replyID, Call: bus.Call{ID: c.call.ID, Name: c.call.Name, Input: c.input},
			Kind: specs[i].kind, User: b.data.User, Context: b.data.Context, SuggestedRules: specs[i].suggested,
			Reason: specs[i].reason, RequestScoped: specs[i].requestScoped}
		if err := s.conts.Park(ctx, rec, s.source); err != nil {
			b.finish(c, internal(c.call, err))
			continue
		}
		if s.parked != nil {
			s.parked.WithLabelValues(rec.Kind).Inc()
		}
		b.parked = append(b.parked, parkedOf(rec))
	}
	for _, c := range b.calls[next:] {
		b.parked = append(b.parked, s.queued(c))
	}
	if first { // once per batch (docs/protocol.md 3.4), not again when a resumed batch parks more
		b.p.report.publish(b, bus.TypeCallParked, "", bus.ParkedEvent{Calls: b.parked})
	}
	return true
}

// parkedOf is a parked record as the reply and call.parked list it.
func parkedOf(rec *parked.Record) bus.Parked {
	return bus.Parked{ID: rec.Call.ID, Name: rec.Call.Name, Input: rec.Call.Input, Kind: rec.Kind,
		Subject: rec.Subject, SuggestedRules: rec.SuggestedRules}
}

// queued is a call held back behind parked ones, as the reply lists it.
func (s parkStep) queued(c *callState) bus.Parked {
	return bus.Parked{ID: c.call.ID, Name: c.call.Name, Input: c.call.Input, Kind: bus.KindQueued,
		Subject: s.subj.Answer(c.call.Name)}
}

// resultsOf collects the results batch b has so far.
func resultsOf(b *batch) map[string]bus.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]bus.Result, len(b.calls))
	for _, c := range b.calls {
		if c.result != nil {
			out[c.call.ID] = *c.result
		}
	}
	return out
}

// settle hands a run with parked calls over to the continuation, once the
// run's other calls have finished. When every answer came in already, the
// batch goes on here (true); otherwise the router that records the last
// answer resumes it.
func (s parkStep) settle(b *batch, next int) bool {
	ctx, cancel := s.landing.start()
	defer cancel()
	cont, resume, err := s.conts.Settle(ctx, b.session, b.replyID, resultsOf(b))
	if err != nil {
		b.p.log.Error("router: continuation not saved", "session", b.session, "reply", b.replyID, "err", err)
		return false
	}
	b.cont = cont
	if !resume {
		return false
	}
	b.mu.Lock()
	for _, c := range b.calls {
		if res, ok := cont.Results[c.call.ID]; ok && c.result == nil {
			c.result = &res // its event came from the router that took the answer
		}
	}
	b.mu.Unlock()
	b.parked = nil
	return true
}

// parkTimeout is the result of a parked call nobody answered in time.
func parkTimeout(c bus.Call, ttl time.Duration) bus.Result {
	return bus.ErrorResult(c, bus.CodeTimeout, "Tool execution timeout after "+ttl.String())
}
