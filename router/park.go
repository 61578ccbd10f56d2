package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/external"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/store"
)

// parkSpec says how a call parks; the zero value means it runs.
type parkSpec struct {
	kind          string
	requestScoped bool
	reason        string
	suggested     []bus.Rule
}

// decide applies the permission engine to a resolved call. It returns a
// result for a denied call, a parkSpec for a call that waits, or neither
// for a call that runs now. reset_tools, the skill loader and
// request-scoped external tools are never asked about.
func (b *batch) decide(sess *groups.Session, c *callState) (parkSpec, *bus.Result) {
	switch t := c.target; {
	case t.Reset, t.Skill:
		return parkSpec{}, nil
	case t.External != nil:
		return parkSpec{kind: bus.KindExternal, requestScoped: true}, nil
	}
	def := &c.target.Tool.Def
	d := permission.Decide(permissionContext(sess), def, c.input)
	switch d.Behavior {
	case permission.Deny:
		return parkSpec{}, ptr(bus.ErrorResult(c.call, bus.CodeDenied,
			fmt.Sprintf("PermissionDeniedError: The tool '%s' may not run: %s.", def.Name, d.Reason)))
	case permission.Ask:
		return parkSpec{kind: bus.KindConfirm, reason: d.Reason, suggested: d.SuggestedRules}, nil
	}
	if def.External {
		return parkSpec{kind: bus.KindExternal}, nil
	}
	return parkSpec{}, nil
}

func permissionContext(s *groups.Session) permission.Context {
	return permission.Context{Mode: s.Mode, Rules: s.Rules, WorkDirs: s.WorkDirs}
}

// cancelled reports whether the agent cancelled the call while the batch
// was parked.
func (b *batch) cancelled(id string) bool {
	return b.cont != nil && (slices.Contains(b.cont.Cancelled, "*") || slices.Contains(b.cont.Cancelled, id))
}

// park records the batch's continuation and parks the calls. It reports
// false when the batch was parked before (a re-sent batch): then the reply
// describes the first one's state and nothing else runs.
func (b *batch) park(calls []*callState, specs []parkSpec, next int) bool {
	r := b.r
	ctx, cancel := landing()
	defer cancel()
	waiting := make([]string, len(calls))
	for i, c := range calls {
		waiting[i] = c.call.ID
	}
	first := b.cont == nil
	if first {
		b.cont = &external.Batch{Session: b.session, ReplyID: b.replyID, TraceParent: b.trace[0], TraceState: b.trace[1],
			Expiry: b.expiry, Data: b.data}
	}
	b.cont.Results, b.cont.Waiting, b.cont.Next, b.cont.Phase = b.results(), waiting, next, external.PhaseRunning
	b.cont.Owner, b.cont.Touched = r.cfg.ID, time.Now().UTC()
	b.setLease(true)
	if err := r.parked.PutBatch(ctx, b.cont); err != nil {
		if store.IsConflict(err) && first {
			b.adoptParked(ctx)
			return false
		}
		for _, c := range calls {
			b.finish(c, internal(c.call, err))
		}
		return true
	}
	b.parked = b.parked[:0]
	for i, c := range calls {
		rec := &external.Record{Session: b.session, ReplyID: b.replyID, Call: bus.Call{ID: c.call.ID, Name: c.call.Name, Input: c.input},
			Kind: specs[i].kind, User: b.data.User, Context: b.data.Context, SuggestedRules: specs[i].suggested,
			Reason: specs[i].reason, RequestScoped: specs[i].requestScoped}
		if err := r.parked.Park(ctx, rec, r.source); err != nil {
			b.finish(c, internal(c.call, err))
			continue
		}
		r.m.Parked.WithLabelValues(rec.Kind).Inc()
		b.parked = append(b.parked, bus.Parked{ID: c.call.ID, Name: c.call.Name, Input: c.input, Kind: rec.Kind,
			Subject: rec.Subject, SuggestedRules: rec.SuggestedRules})
	}
	for _, c := range b.calls[next:] {
		b.parked = append(b.parked, bus.Parked{ID: c.call.ID, Name: c.call.Name, Input: c.call.Input, Kind: bus.KindQueued,
			Subject: r.subj.Answer(c.call.Name)})
	}
	if first { // once per batch (PROTOCOL.md 3.4), not again when a resumed batch parks more
		r.publishEvent(b, bus.TypeCallParked, "", bus.ParkedEvent{Calls: b.parked})
	}
	return true
}

// reuseParked finishes, with the result an earlier copy of this batch
// recorded, each call that copy parked and that has settled since
// (answered, expired or cancelled): a batch re-sent after its answers came
// in gets the same results and parks nothing again. It returns the calls
// still to park.
func (b *batch) reuseParked(calls []*callState, specs []parkSpec) ([]*callState, []parkSpec) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keep []*callState
	var keepSpecs []parkSpec
	for i, c := range calls {
		rec, err := b.r.parked.Get(ctx, bus.CallKey(b.session, b.replyID, c.call.ID))
		if err == nil && rec.Status != external.StatusParked && rec.Result != nil {
			b.finish(c, *rec.Result)
			continue
		}
		keep, keepSpecs = append(keep, c), append(keepSpecs, specs[i])
	}
	return keep, keepSpecs
}

// adoptParked fills the batch from the continuation of the same reply id
// that an earlier copy of this batch left.
func (b *batch) adoptParked(ctx context.Context) {
	cont, err := b.r.parked.GetBatch(ctx, b.session, b.replyID)
	if err != nil {
		return
	}
	b.mu.Lock()
	for _, c := range b.calls {
		if res, ok := cont.Results[c.call.ID]; ok {
			c.result = &res
		}
	}
	b.mu.Unlock()
	recs := b.r.parked.Parked(b.session, b.replyID)
	b.parked = b.parked[:0]
	for _, rec := range recs {
		b.parked = append(b.parked, bus.Parked{ID: rec.Call.ID, Name: rec.Call.Name, Input: rec.Call.Input, Kind: rec.Kind,
			Subject: rec.Subject, SuggestedRules: rec.SuggestedRules})
	}
	for _, c := range b.calls[min(cont.Next, len(b.calls)):] {
		if c.result == nil {
			b.parked = append(b.parked, bus.Parked{ID: c.call.ID, Name: c.call.Name, Input: c.call.Input, Kind: bus.KindQueued,
				Subject: b.r.subj.Answer(c.call.Name)})
		}
	}
}

// results collects the results the batch has so far.
func (b *batch) results() map[string]bus.Result {
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

// settleRun hands a run with parked calls over to the continuation, once
// the run's other calls have finished. When every answer came in already,
// the batch goes on here (true); otherwise the router that records the last
// answer resumes it.
func (b *batch) settleRun(next int) bool {
	ctx, cancel := landing()
	defer cancel()
	mine := b.results()
	cont, err := b.r.parked.UpdateBatch(ctx, b.session, b.replyID, func(cb *external.Batch) error {
		for id, res := range mine {
			if _, ok := cb.Results[id]; !ok {
				cb.Results[id] = res
			}
		}
		cb.Phase, cb.Owner = external.PhaseParked, ""
		if cb.Ready() {
			cb.Phase, cb.ResumedBy, cb.Owner, cb.Touched = external.PhaseResumed, "run", b.r.cfg.ID, time.Now().UTC()
		}
		return nil
	})
	if err != nil {
		b.r.log.Error("router: continuation not saved", "session", b.session, "reply", b.replyID, "err", err)
		return false
	}
	b.cont = cont
	b.setLease(cont.Phase == external.PhaseResumed)
	if cont.Phase != external.PhaseResumed {
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

// onAnswer takes an answer to a parked call: the first valid answer wins
// (compare-and-set on the parked record) and is acknowledged; the call's
// result follows, and the batch resumes when it was the last one awaited.
func (r *Router) onAnswer(m *nats.Msg) {
	tool, ok := r.subj.Token(m.Subject, "answer")
	if !ok {
		r.reject(m, bus.Errorf(bus.CodeBadEvent, "subject %q does not name a tool", m.Subject))
		return
	}
	e, err := r.decode(m, "", bus.TypeAnswer)
	if err != nil {
		r.reject(m, err)
		return
	}
	if !bus.ValidID(e.SessionID) || !bus.ValidID(e.ReplyID) || !bus.ValidID(e.ToolCallID) {
		r.reject(m, bus.Errorf(bus.CodeBadEvent, "an answer needs valid sessionid, replyid and toolcallid attributes"))
		return
	}
	var a bus.Answer
	if err := e.DataAs(&a); err != nil {
		r.reject(m, err)
		return
	}
	ctx, cancel := landing()
	defer cancel()
	key := bus.CallKey(e.SessionID, e.ReplyID, e.ToolCallID)
	cur, err := r.parked.Get(ctx, key)
	if err != nil || cur.Call.Name != tool {
		if err == nil || store.IsNotFound(err) {
			err = bus.Errorf(bus.CodeNotParked, "no call %s of tool %s is parked in session %s, reply %s", e.ToolCallID, tool, e.SessionID, e.ReplyID)
		}
		r.reject(m, err)
		return
	}
	if cur.Status == external.StatusParked {
		if err := r.checkAnswer(cur, &a); err != nil {
			r.reject(m, err)
			return
		}
	}
	rec, err := r.parked.Transition(ctx, key, external.StatusParked, store.UntilLanded, func(rec *external.Record) error {
		rec.Status, rec.Answer = external.StatusAnswered, &a
		return nil
	})
	if err != nil {
		r.reject(m, err)
		return
	}
	r.m.Answers.WithLabelValues("accepted").Inc()
	if rec.Kind == bus.KindConfirm {
		// Before the ack: a batch the agent sends once the answer is
		// acknowledged must find the rules in place, not ask again.
		r.remember(ctx, rec.Session, a.Rules)
	}
	if err := bus.Respond(r.nc, m, r.source, bus.TypeAnswerAck, bus.AnswerAck{Accepted: true}); err != nil {
		r.log.Warn("router: answer ack failed", "err", err)
	}
	r.settle(rec)
}

// checkAnswer validates an answer against the kind of call it answers; a
// bad answer is a bad_request and changes nothing.
func (r *Router) checkAnswer(rec *external.Record, a *bus.Answer) error {
	if err := a.CheckKind(rec.Kind); err != nil {
		return err
	}
	if rec.Kind == bus.KindConfirm {
		if a.Confirmed == nil {
			return bus.Errorf(bus.CodeBadRequest, "call %s waits for a confirmation: {\"confirmed\": true|false}", rec.Call.ID)
		}
		for _, rule := range a.Rules {
			if err := permission.CheckRule(rule); err != nil {
				return bus.Errorf(bus.CodeBadRequest, "rule: %v", err)
			}
		}
		if *a.Confirmed && len(a.Input) > 0 {
			t, ok := r.reg.Lookup(rec.Call.Name)
			if !ok {
				return bus.Errorf(bus.CodeNotParked, "tool %s is no longer registered", rec.Call.Name)
			}
			input, v, err := schemas.ParseInput(a.Input)
			if err != nil {
				return bus.Errorf(bus.CodeBadRequest, "edited input: %v", err)
			}
			if problems := t.Schema.Validate(v); len(problems) > 0 {
				return bus.Errorf(bus.CodeBadRequest, "%s", schemas.InvalidInputMessage(rec.Call.Name, problems))
			}
			a.Input = input
		}
		return nil
	}
	if a.Confirmed != nil {
		return bus.Errorf(bus.CodeBadRequest, "call %s waits for the external result {\"state\", \"output\"}, not a confirmation", rec.Call.ID)
	}
	if a.State != bus.StateSuccess && a.State != bus.StateError {
		return bus.Errorf(bus.CodeBadRequest, "state must be success or error, got %q", a.State)
	}
	for i, bl := range a.Output {
		if err := checkBlock(bl); err != nil {
			return bus.Errorf(bus.CodeBadRequest, "output[%d]: %v", i, err)
		}
	}
	return nil
}

func checkBlock(bl bus.Block) error {
	switch bl.Type {
	case bus.BlockText:
		return nil
	case bus.BlockData:
		if (bl.Data == "") == (bl.URL == "") {
			return errors.New("a data block has exactly one of data and url")
		}
		if bl.MediaType == "" {
			return errors.New("a data block needs media_type")
		}
		return nil
	}
	return fmt.Errorf("block type %q must be text or data", bl.Type)
}

// remember adds a confirmation's rules to the session's permission context.
func (r *Router) remember(ctx context.Context, session string, rules []bus.Rule) {
	if len(rules) == 0 {
		return
	}
	if _, err := r.groups.Update(ctx, session, func(s *groups.Session) error {
		for _, rule := range rules {
			if !slices.Contains(s.Rules, rule) {
				s.Rules = append(s.Rules, rule)
			}
		}
		return nil
	}); err != nil {
		r.log.Warn("router: rules not remembered", "session", session, "err", err)
	}
}

// settle turns an accepted answer into the call's result.
func (r *Router) settle(rec *external.Record) {
	a := rec.Answer
	if rec.Kind != bus.KindConfirm {
		res := bus.Result{ID: rec.Call.ID, Name: rec.Call.Name, State: a.State, Output: a.Output}
		if res.Output == nil {
			res.Output = []bus.Block{}
		}
		if a.State == bus.StateError {
			fail(&res, bus.CodeToolError, toolFailedText)
		}
		r.complete(rec, res)
		return
	}
	ctx, cancel := landing()
	defer cancel()
	if len(a.Rules) > 0 { // remembered by onAnswer
		defer r.confirmCovered(rec)
	}
	if !*a.Confirmed {
		r.complete(rec, bus.ErrorResult(rec.Call, bus.CodeDenied,
			fmt.Sprintf("<system-reminder>The execution of tool \"%s\" is denied by user!</system-reminder>", rec.Call.Name)))
		return
	}
	t, ok := r.reg.Lookup(rec.Call.Name)
	if ok && t.Def.External {
		if _, err := r.parked.Repark(ctx, rec.Key(), bus.KindExternal, r.source); err != nil {
			r.complete(rec, internal(rec.Call, err))
		}
		return
	}
	r.complete(rec, r.runConfirmed(rec))
}

// runConfirmed runs a confirmed call on a worker, with its edited input.
func (r *Router) runConfirmed(rec *external.Record) bus.Result {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cont, err := r.parked.GetBatch(ctx, rec.Session, rec.ReplyID)
	cancel()
	if err != nil {
		return internal(rec.Call, fmt.Errorf("continuation: %w", err))
	}
	b, err := r.makeBatch(cont.Session, cont.ReplyID, cont.TraceParent, cont.TraceState, cont.Expiry, cont.Data)
	if err != nil {
		return internal(rec.Call, err)
	}
	b.cont, b.silent = cont, true // complete publishes the result, once
	r.track(b)
	defer r.untrack(b)
	var c *callState
	for _, cs := range b.calls {
		if cs.call.ID == rec.Call.ID {
			c = cs
		}
	}
	t, ok := r.reg.Lookup(rec.Call.Name)
	if c == nil || !ok {
		return unavailable(rec.Call)
	}
	if !r.reg.Live(t) {
		return unavailable(rec.Call)
	}
	c.target, c.input = groups.Resolved{Tool: t}, rec.Call.Input
	if len(rec.Answer.Input) > 0 {
		c.input = rec.Answer.Input
	}
	b.execute(c)
	return *c.result
}

// confirmCovered answers, as confirmed, the other calls of the same batch
// that wait for a confirmation and that the session's rules now allow: a
// person who said "yes, and remember" is not asked twice.
func (r *Router) confirmCovered(answered *external.Record) {
	sess := r.groups.Session(answered.Session)
	for _, rec := range r.parked.Parked(answered.Session, answered.ReplyID) {
		if rec.Kind != bus.KindConfirm || rec.Call.ID == answered.Call.ID {
			continue
		}
		t, ok := r.reg.Lookup(rec.Call.Name)
		if !ok || permission.Decide(permissionContext(sess), &t.Def, rec.Call.Input).Behavior != permission.Allow {
			continue
		}
		yes := true
		ctx, cancel := landing()
		got, err := r.parked.Transition(ctx, rec.Key(), external.StatusParked, store.Bounded, func(x *external.Record) error {
			x.Status, x.Answer = external.StatusAnswered, &bus.Answer{Confirmed: &yes}
			return nil
		})
		cancel()
		if err == nil {
			r.settle(got)
		}
	}
}

// complete records a parked call's result, publishes it, and resumes the
// batch when it was the last one awaited.
func (r *Router) complete(rec *external.Record, res bus.Result) {
	ctx, cancel := landing()
	defer cancel()
	if rec.Status == external.StatusAnswered {
		if _, err := r.parked.Transition(ctx, rec.Key(), external.StatusAnswered, store.UntilLanded, func(x *external.Record) error {
			x.Status, x.Result = external.StatusDone, &res
			return nil
		}); err != nil {
			r.log.Warn("router: parked record not closed", "key", rec.Key(), "err", err)
		}
	}
	// The call.result event goes out before the result is recorded, on the
	// connection that then records it: the server handles one connection's
	// messages in order, so whichever router sees the result recorded and
	// publishes batch.done does so after this event has been delivered.
	var trace [2]string
	if cont, err := r.parked.GetBatch(ctx, rec.Session, rec.ReplyID); err == nil {
		trace = [2]string{cont.TraceParent, cont.TraceState}
	}
	e, err := bus.NewEvent(bus.TypeCallResult, r.source, res)
	var m *nats.Msg
	if err == nil {
		e.SessionID, e.ReplyID, e.ToolCallID, e.Subject = rec.Session, rec.ReplyID, rec.Call.ID, rec.Call.ID
		e.TraceParent, e.TraceState = trace[0], trace[1]
		m, err = e.Msg(r.subj.Events(rec.Session))
	}
	if err == nil {
		err = r.events.stored(ctx, []*sentEvent{r.events.publish(m, e.ID)})
	}
	if err != nil {
		r.log.Warn("router: result event not published", "key", rec.Key(), "err", err)
	}
	cont, err := r.parked.UpdateBatch(ctx, rec.Session, rec.ReplyID, func(b *external.Batch) error {
		b.Results[rec.Call.ID] = res
		if b.Phase == external.PhaseParked && b.Ready() {
			b.Phase, b.ResumedBy, b.Owner, b.Touched = external.PhaseResumed, rec.Call.ID, r.cfg.ID, time.Now().UTC()
		}
		return nil
	})
	if err != nil {
		r.log.Error("router: parked result not recorded", "key", rec.Key(), "err", err)
		return
	}
	// Exactly one completion moved the phase to resumed in the
	// compare-and-set that added its result: that one resumes.
	if cont.Phase == external.PhaseResumed && cont.ResumedBy == rec.Call.ID {
		r.resume(cont)
	}
}

// fromContinuation rebuilds a batch from its continuation, with the
// results recorded so far.
func (r *Router) fromContinuation(cont *external.Batch) (*batch, error) {
	b, err := r.makeBatch(cont.Session, cont.ReplyID, cont.TraceParent, cont.TraceState, cont.Expiry, cont.Data)
	if err != nil {
		return nil, err
	}
	b.cont, b.resumed = cont, true
	for _, c := range b.calls {
		if res, ok := cont.Results[c.call.ID]; ok {
			c.result = &res
		}
	}
	return b, nil
}

// resume runs the rest of a batch whose awaited calls have all finished.
func (r *Router) resume(cont *external.Batch) {
	b, err := r.fromContinuation(cont)
	if err != nil {
		r.log.Error("router: continuation unusable", "session", cont.Session, "reply", cont.ReplyID, "err", err)
		return
	}
	b.setLease(true)
	r.track(b)
	defer r.untrack(b)
	complete := b.run(cont.Next)
	switch {
	case b.cutOff(): // the lease lapses and another router takes the batch over
	case complete:
		b.done()
	default:
		b.stored()
	}
}

// setLease says whether this router owns the batch's continuation and
// must keep renewing its lease.
func (b *batch) setLease(on bool) {
	b.mu.Lock()
	b.lease = on
	b.mu.Unlock()
}

// renewLeases renews the lease of every continuation this router works on.
func (r *Router) renewLeases(now time.Time) {
	r.mu.Lock()
	var owned []*batch
	for _, b := range r.batches {
		b.mu.Lock()
		if b.lease && b.cont != nil {
			owned = append(owned, b)
		}
		b.mu.Unlock()
	}
	r.mu.Unlock()
	for _, b := range owned {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := r.parked.UpdateBatch(ctx, b.session, b.replyID, func(cb *external.Batch) error {
			if cb.Owner != r.cfg.ID || !cb.Active() {
				return errNotOwner
			}
			cb.Touched = now.UTC()
			return nil
		})
		cancel()
		if err != nil && !errors.Is(err, errNotOwner) && !store.IsNotFound(err) {
			r.log.Warn("router: lease not renewed", "session", b.session, "reply", b.replyID, "err", err)
		}
	}
}

var errNotOwner = errors.New("not the owner of the continuation")

// takeOver resumes continuations whose owner stopped renewing its lease (a
// router that died while running part of a parked batch). The
// compare-and-set on the continuation picks one router.
func (r *Router) takeOver(now time.Time, lease time.Duration) {
	cutoff := now.Add(-3 * lease)
	for _, stale := range r.parked.Stale(cutoff) {
		if stale.Owner == r.cfg.ID {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cont, err := r.parked.UpdateBatch(ctx, stale.Session, stale.ReplyID, func(cb *external.Batch) error {
			if !cb.Active() || !cb.Touched.Before(cutoff) {
				return errNotOwner
			}
			r.log.Warn("router: taking over a batch whose router stopped", "session", cb.Session, "reply", cb.ReplyID, "owner", cb.Owner)
			cb.Phase, cb.Owner, cb.Touched, cb.ResumedBy = external.PhaseResumed, r.cfg.ID, time.Now().UTC(), "takeover"
			return nil
		})
		cancel()
		if err != nil {
			continue
		}
		r.mu.Lock()
		closed := r.closed
		if !closed {
			r.work.Add(1)
		}
		r.mu.Unlock()
		if closed {
			return
		}
		r.pool.Go(func() { defer r.work.Done(); r.repair(cont) })
	}
}

// repair finishes a continuation taken over from a router that died: the
// calls of its last run that never got a result run again (the ledger keeps
// side-effecting ones from running twice), then the batch waits for its
// answers or goes on.
func (r *Router) repair(cont *external.Batch) {
	b, err := r.fromContinuation(cont)
	if err != nil {
		r.log.Error("router: continuation unusable", "session", cont.Session, "reply", cont.ReplyID, "err", err)
		return
	}
	b.setLease(true)
	r.track(b)
	defer r.untrack(b)
	b.resolveFrom(0)
	var wg sync.WaitGroup
	for _, c := range b.calls[:min(cont.Next, len(b.calls))] {
		if c.result != nil || slices.Contains(cont.Waiting, c.call.ID) {
			continue
		}
		if c.early != nil {
			b.finish(c, *c.early)
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); b.execute(c) }()
	}
	wg.Wait()
	if b.cutOff() {
		return // the lease lapses and another router takes the batch over
	}
	if b.settleRun(cont.Next) && b.run(cont.Next) && !b.cutOff() {
		b.done()
	} else if !b.cutOff() {
		b.stored()
	}
}

// sweep expires the parked calls whose time is up.
func (r *Router) sweep(now time.Time) {
	for _, rec := range r.parked.Expired(now) {
		r.endParked(rec, external.StatusExpired, bus.ErrorResult(rec.Call, bus.CodeTimeout,
			"Tool execution timeout after "+r.parked.TTL().String()))
	}
}

// endParked moves a parked call to a final status (expired, cancelled) with
// res as its result; the compare-and-set picks one router when several try.
func (r *Router) endParked(rec *external.Record, status string, res bus.Result) {
	ctx, cancel := landing()
	got, err := r.parked.Transition(ctx, rec.Key(), external.StatusParked, store.UntilLanded, func(x *external.Record) error {
		x.Status, x.Result = status, &res
		return nil
	})
	cancel()
	if err == nil {
		r.complete(got, res)
	}
}

// cancelParked interrupts the parked calls of a reply (all when ids is
// empty) and marks its queued calls so they never run.
func (r *Router) cancelParked(session, replyID string, ids []string) {
	recs := r.parked.Parked(session, replyID)
	if len(recs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	marks := ids
	if len(marks) == 0 {
		marks = []string{"*"}
	}
	_, err := r.parked.UpdateBatch(ctx, session, replyID, func(b *external.Batch) error {
		for _, id := range marks {
			if !slices.Contains(b.Cancelled, id) {
				b.Cancelled = append(b.Cancelled, id)
			}
		}
		return nil
	})
	cancel()
	if err != nil && !store.IsNotFound(err) {
		r.log.Warn("router: cancel not recorded", "session", session, "reply", replyID, "err", err)
	}
	for _, rec := range recs {
		if len(ids) == 0 || slices.Contains(ids, rec.Call.ID) {
			r.endParked(rec, external.StatusCancelled, interrupted(rec.Call))
		}
	}
}
