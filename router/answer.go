package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/schemas"
)

// answers takes answers on P.answer.<tool> and P.approve.<tool> (protocol 6.3).
type answers struct {
	*wire
	parked  parkedCalls
	reg     toolLookup
	groups  sessionRules
	secured bool // the router binds users by credentials (Config.Identities)

	sealAnswer func(key string, out []bus.Block) ([]bus.Block, error)
	// fit stores what of an output would not fit beside extra bytes (offload.Offloader.Fit; nil: nothing).
	fit        func(ctx context.Context, key string, out []bus.Block, extra int, dup bool) ([]bus.Block, error)
	events     eventPort
	runTool    func(ctx context.Context, j *job) bus.Result
	resume     func(cont *parked.Batch)
	confirming *confirmed
	cancelling func(session, replyID, callID string) bool // a cancel of the call is still to record here (cancelEnds)
	audit      *auditTrail                                // the audit trail of parked calls; nil when off (chain.go)
}

// parkedCalls is what answers uses of the parked calls (parked.Store).
type parkedCalls interface {
	Answer(ctx context.Context, key, tool string, a *bus.Answer, decide parked.Decide) (parked.Answered, error)
	Resume(ctx context.Context, rec *parked.Record, res bus.Result, report func(*parked.Batch)) (*parked.Batch, bool, error)
	Mend(ctx context.Context, rec *parked.Record, res bus.Result, report func(*parked.Batch)) (*parked.Batch, bool, error)
	Continuation(ctx context.Context, rec *parked.Record) (*parked.Batch, error)
	Parked(session, replyID string) []*parked.Record
	Taken(session, replyID string) int
}

// toolLookup is what answers uses of the registry.
type toolLookup interface {
	Lookup(name string) (*registry.Tool, bool)
	Live(t *registry.Tool) bool
}

// sessionRules is what answers uses of the sessions (remembered rules).
type sessionRules interface {
	Update(ctx context.Context, id string, fn func(*groups.Session) error) (*groups.Session, error)
	Session(id string) *groups.Session
}

// decideAnswer decides an accepted answer a to rec (tool nil: unregistered).
func decideAnswer(rec *parked.Record, a *bus.Answer, tool *registry.Tool) (parked.Verdict, bus.Result, error) {
	switch {
	case rec.Kind != bus.KindConfirm:
		return parked.Done, answerResult(rec.Call, a), nil
	case !*a.Confirmed:
		return parked.Done, deniedByUser(rec.Call, a.Reason), nil
	case tool != nil && tool.Def.External:
		return parked.Repark, bus.Result{}, nil
	}
	return parked.Confirmed, bus.Result{}, nil
}

func (r *answers) onAnswer(m *nats.Msg)  { r.answer(m, viaAnswer) }
func (r *answers) onApprove(m *nats.Msg) { r.answer(m, viaApprove) }

// The subjects answers come on, told apart by NATS permissions.
const (
	viaAnswer  = "answer"
	viaApprove = "approve"
)

func (r *answers) answer(m *nats.Msg, via string) {
	tool, e, err := r.decodeCall(m, via, bus.TypeAnswer, "an answer")
	var a bus.Answer
	if err == nil {
		err = e.DataAs(&a)
	}
	if err != nil {
		r.reject(m, err)
		return
	}
	if r.cancelling(e.SessionID, e.ReplyID, e.ToolCallID) {
		// The cancel came first here: its end of the record decides (3.5).
		r.reject(m, bus.Errorf(bus.CodeNotParked, "call %s is being cancelled: its cancel is not recorded yet", e.ToolCallID))
		return
	}
	ctx, cancel := r.landing()
	defer cancel()
	// The one registry lookup of this answer, shared by check, settle and run.
	t, _ := r.reg.Lookup(tool)
	decide := func(rec *parked.Record, a *bus.Answer) (parked.Verdict, bus.Result, error) {
		if err := r.checkAnswer(rec, a, via, t); err != nil {
			return 0, bus.Result{}, err
		}
		rec.AnsweredBy, rec.AnsweredAt = e.Source, time.Now().UTC()
		if via == viaApprove {
			rec.AnsweredBy += " via " + r.subj.Handoffs.Approve(tool)
		}
		return decideAnswer(rec, a, t)
	}
	got, err := r.parked.Answer(ctx, bus.CallKey(e.SessionID, e.ReplyID, e.ToolCallID), tool, &a, decide)
	if err != nil {
		r.reject(m, err)
		return
	}
	r.m.Answers.WithLabelValues("accepted").Inc()
	if a.Confirmed != nil {
		// Before the ack: the agent's next batch must find the rules in place.
		r.remember(ctx, got.Record.Session, a.Rules)
	}
	r.respond(m, bus.TypeAnswerAck, bus.AnswerAck{Accepted: true}, "answer ack")
	r.settle(got, t)
}

// checkAnswer validates an answer against the kind of call it answers and
// the subject it came on (via): a bad one is a bad_request (the rules are
// docs/security.md's).
func (r *answers) checkAnswer(rec *parked.Record, a *bus.Answer, via string, t *registry.Tool) error {
	if via == viaApprove && rec.Kind != bus.KindConfirm {
		return bus.Errorf(bus.CodeBadRequest, "call %s is parked as %s, not for a confirmation: P.approve.<tool> takes confirmations only; its answer goes to %s", rec.Call.ID, rec.Kind, rec.Subject)
	}
	if err := a.CheckKind(rec.Kind); err != nil {
		return err
	}
	if rec.Kind == bus.KindConfirm {
		if via == viaAnswer && r.secured {
			return bus.Errorf(bus.CodeBadRequest, "call %s waits for a confirmation: on a secured router confirmations go to %s, not %s", rec.Call.ID, r.subj.Handoffs.Approve(rec.Call.Name), r.subj.Handoffs.Answer(rec.Call.Name))
		}
		if a.Confirmed == nil {
			return bus.Errorf(bus.CodeBadRequest, "call %s waits for a confirmation: {\"confirmed\": true|false, \"input_digest\": \"...\"}", rec.Call.ID)
		}
		if a.Reason != "" && (*a.Confirmed || len(a.Reason) > bus.MaxDenyReason) {
			return bus.Errorf(bus.CodeBadRequest, "a confirmation's reason goes with \"confirmed\": false only, at most %d bytes", bus.MaxDenyReason)
		}
		// Required on a secured router's approver subject; an open one may skip it.
		if err := checkDigest(rec, a, via == viaApprove && r.secured); err != nil {
			return err
		}
		for _, rule := range a.Rules {
			if err := permission.CheckRule(rule); err != nil {
				return bus.Errorf(bus.CodeBadRequest, "rule: %v", err)
			}
			if via == viaApprove && !suggested(rec.SuggestedRules, rule) {
				text, _ := json.Marshal(rule)
				return bus.Errorf(bus.CodeBadRequest, "rule %s is not among call %s's suggested_rules: an approver remembers only those", text, rec.Call.ID)
			}
		}
		if via == viaApprove && len(a.Input) > 0 {
			return bus.Errorf(bus.CodeBadRequest, "an approver confirms call %s's parked input as it is: an edited input is refused on %s (deny it instead)", rec.Call.ID, r.subj.Handoffs.Approve(rec.Call.Name))
		}
		if *a.Confirmed && len(a.Input) > 0 {
			if t == nil {
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
	out, err := r.sealAnswer(bus.CallKey(rec.Session, rec.ReplyID, rec.Call.ID), a.Output) // protocol 5.9
	if err == nil {
		a.Output, err = r.fitRecord(rec, out, a.State != bus.StateSuccess)
	}
	return err
}

// fitRecord stores what of a parked call's output would take the write that
// ends its record, or its share of its batch's continuation, past the max
// payload (protocol 5.9, 6.1, 1.19).
func (r *answers) fitRecord(rec *parked.Record, out []bus.Block, dup bool) ([]bus.Block, error) {
	if r.fit == nil {
		return out, nil
	}
	extra := len(rec.Call.Input) + len(rec.Batch) + len(rec.User) + len(rec.Context)
	if rec.Answer != nil {
		extra += len(rec.Answer.Input)
	}
	extra = max(extra, r.parked.Taken(rec.Session, rec.ReplyID)) // the batch's own continuation takes it too
	ctx, cancel := context.WithTimeout(r.base, outputsBudget)
	defer cancel()
	return r.fit(ctx, rec.Key(), out, extra, dup)
}

// checkDigest checks a confirmation's input_digest; required: it must be given.
func checkDigest(rec *parked.Record, a *bus.Answer, required bool) error {
	want := rec.InputDigest
	if want == "" { // parked before records carried it
		want = bus.InputDigest(rec.Call.Input)
	}
	switch {
	case a.InputDigest == "" && required:
		return bus.Errorf(bus.CodeBadRequest, "a confirmation of call %s needs input_digest, the parked input's (%s: from the confirm request or parked.list)", rec.Call.ID, want)
	case a.InputDigest != "" && a.InputDigest != want:
		return bus.Errorf(bus.CodeBadRequest, "input changed: call %s's parked input has input_digest %s, the confirmation names %s", rec.Call.ID, want, a.InputDigest)
	}
	return nil
}

// suggested reports whether rule is among rules, behavior defaulting to allow.
func suggested(rules []bus.Rule, rule bus.Rule) bool {
	norm := func(r bus.Rule) bus.Rule {
		if r.Behavior == "" {
			r.Behavior = "allow"
		}
		return r
	}
	return slices.ContainsFunc(rules, func(s bus.Rule) bool { return norm(s) == norm(rule) })
}

func checkBlock(bl bus.Block) error {
	if err := bl.Annotations.Check(); err != nil {
		return err
	}
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
func (r *answers) remember(ctx context.Context, session string, rules []bus.Rule) {
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

// answerResult is the result an external answer gives its call.
func answerResult(c bus.Call, a *bus.Answer) bus.Result {
	res := bus.Result{ID: c.ID, Name: c.Name, State: a.State, Output: a.Output}
	if res.Output == nil {
		res.Output = []bus.Block{}
	}
	if a.State == bus.StateError {
		fail(&res, bus.CodeToolError, toolFailedText)
	}
	return res
}

// deniedByUser is a confirmation answered no, with its reason (6.3).
func deniedByUser(c bus.Call, reason string) bus.Result {
	text := fmt.Sprintf("<system-reminder>The execution of tool \"%s\" is denied by user!</system-reminder>", c.Name)
	if reason != "" {
		text += "\nReason: " + reason
	}
	return bus.ErrorResult(c, bus.CodeDenied, text)
}

// settle reports an accepted answer's result as its verdict says.
func (r *answers) settle(got parked.Answered, tool *registry.Tool) {
	rec := got.Record
	if got.Answer.Confirmed != nil && len(got.Answer.Rules) > 0 { // remembered by answer
		defer r.confirmCovered(rec)
	}
	switch got.Verdict {
	case parked.Repark:
		return
	case parked.Done:
		r.complete(rec, *rec.Result)
		return
	}
	ctx, cancel := context.WithTimeout(r.base, 10*time.Second)
	cont, err := r.parked.Continuation(ctx, rec)
	cancel()
	var res bus.Result
	if err != nil {
		res = internal(rec.Call, fmt.Errorf("continuation: %w", err))
	} else if res = r.runConfirmed(rec, tool, cont); res.Output != nil {
		if res.Output, err = r.fitRecord(rec, res.Output, res.State != bus.StateSuccess); err != nil {
			res = internal(rec.Call, fmt.Errorf("storing the output its record cannot hold: %w", err))
		}
	}
	r.complete(rec, res)
}

// settleTaken settles again an answered call taken over from a stopped router.
func (r *answers) settleTaken(rec *parked.Record) {
	tool, _ := r.reg.Lookup(rec.Call.Name)
	v, res, _ := decideAnswer(rec, rec.Answer, tool)
	if v == parked.Done { // answered by a router of protocol 1.4, which recorded the result apart
		rec.Result = &res
	}
	r.settle(parked.Answered{Record: rec, Verdict: v, Answer: rec.Answer}, tool)
}

// runConfirmed runs a confirmed call as its batch would (cancels: confirming).
func (r *answers) runConfirmed(rec *parked.Record, tool *registry.Tool, cont *parked.Batch) bus.Result {
	t, err := newTurn(cont.Session, cont.ReplyID, [2]string{cont.TraceParent, cont.TraceState}, cont.Expiry, cont.Data)
	if err != nil {
		return internal(rec.Call, err)
	}
	if tool == nil || !r.reg.Live(tool) || !slices.ContainsFunc(t.data.Calls, func(c bus.Call) bool { return c.ID == rec.Call.ID }) {
		return unavailable(rec.Call)
	}
	input, sent := rec.Call.Input, json.RawMessage(nil)
	if len(rec.Answer.Input) > 0 {
		input, sent = rec.Answer.Input, rec.Call.Input // the ledger keeps the digest of the call as sent (3.1)
	}
	j := &job{session: t.session, replyID: t.replyID, trace: t.trace, deadline: t.deadline, user: t.data.User,
		context: t.data.Context, call: bus.Call{ID: rec.Call.ID, Name: rec.Call.Name, Input: input}, sent: sent, tool: tool}
	ctx, cancel := context.WithCancel(r.base)
	defer r.confirming.add(rec.Session, rec.ReplyID, rec.Call.ID, cancel)()
	return r.runTool(ctx, j)
}

// confirmCovered confirms the batch's other confirm parks the rules now allow.
func (r *answers) confirmCovered(answered *parked.Record) {
	sess := r.groups.Session(answered.Session)
	for _, rec := range r.parked.Parked(answered.Session, answered.ReplyID) {
		if rec.Kind != bus.KindConfirm || rec.Call.ID == answered.Call.ID || r.cancelling(rec.Session, rec.ReplyID, rec.Call.ID) {
			continue
		}
		t, ok := r.reg.Lookup(rec.Call.Name)
		if !ok || permission.Decide(permissionContext(sess), &t.Def, rec.Call.Input).Behavior != permission.Allow {
			continue
		}
		ctx, cancel := r.landing()
		got, err := r.parked.Answer(ctx, rec.Key(), rec.Call.Name, &bus.Answer{Confirmed: new(true)},
			func(rec *parked.Record, a *bus.Answer) (parked.Verdict, bus.Result, error) {
				return decideAnswer(rec, a, t)
			})
		cancel()
		if err == nil {
			r.settle(got, t)
		}
	}
}

// complete reports a parked call's result, records it, and resumes its batch.
func (r *answers) complete(rec *parked.Record, res bus.Result) { r.record(rec, res, r.parked.Resume) }

// mend completes a stranded call as its stopped router would have (6.1).
func (r *answers) mend(rec *parked.Record) { r.record(rec, *rec.Result, r.parked.Mend) }

// record reports rec's result, joins it to the batch (join) and maybe resumes it.
func (r *answers) record(rec *parked.Record, res bus.Result, join func(context.Context, *parked.Record, bus.Result, func(*parked.Batch)) (*parked.Batch, bool, error)) {
	ctx, cancel := r.landing()
	defer cancel()
	// The call.result goes out before the continuation records the result,
	// on the same connection, so any batch.done follows it; its id is the
	// call's, so a mender's copy is stored once (docs/protocol.md 3.4).
	report := func(cont *parked.Batch) {
		var trace [2]string
		if cont != nil {
			trace = [2]string{cont.TraceParent, cont.TraceState}
		}
		r.audit.recordParked(ctx, rec, res) // the audit trail (chain.go)
		ev, err := r.events.publish(parked.ResultID(rec.Session, rec.ReplyID, rec.Call.ID), bus.TypeCallResult, rec.Session, rec.ReplyID, rec.Call.ID, trace, res)
		if err == nil {
			err = r.events.stored(ctx, []*sentEvent{ev})
		}
		if err != nil {
			r.log.Warn("router: result event not published", "key", rec.Key(), "err", err)
		}
	}
	cont, resume, err := join(ctx, rec, res, report)
	if err != nil {
		// A bus error: another router made the result and reports it.
		r.log.Warn("router: parked result not recorded", "key", rec.Key(), "err", err)
		return
	}
	if resume {
		r.resume(cont)
	}
}
