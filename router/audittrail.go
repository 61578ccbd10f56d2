package router

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/rcache"
)

// auditTrail is the audit middleware (docs/guardrails.md "Audit trail"):
// one record per call that ends without parking, awaited before the reply
// (audited); parked calls are recorded when they end (recordParked),
// refused batches by refused. The permission decision comes with the call
// (callState.rule).
type auditTrail struct {
	tr       trail
	id       string // the router's
	log      *slog.Logger
	ids      Identities
	sessions interface {
		Session(id string) *groups.Session
	} // the session's permission mode (groups.Store)
	lost       prometheus.Counter
	refusals   audit.Refusals // bounds the records of refused batches per caller; suppressed counts those past it
	suppressed prometheus.Counter
}

// trail is what the middleware uses of audit.Trail.
type trail interface {
	Write(rec *audit.Record, input json.RawMessage) (*audit.Pending, error)
	WriteRefusal(rec *audit.Record) (*audit.Pending, error)
	Stored(ctx context.Context, ps []*audit.Pending) (lost []*audit.Pending)
}

func (a *auditTrail) wrap(next Executor) Executor {
	return ExecFunc(func(ctx context.Context, j *job) bus.Result {
		res := next.Exec(ctx, j)
		if j.c != nil {
			a.record(j.b, j.c, res)
		}
		return res
	})
}

// record publishes the audit record of call c of batch b without
// waiting; audited waits for it before the reply. A call recorded twice
// (a cancel racing its end) is stored once: the call key is the record's
// message id.
func (a *auditTrail) record(b *batch, c *callState, res bus.Result) {
	rec := &audit.Record{Time: time.Now().UTC(), Router: a.id, Session: b.session, ReplyID: b.replyID, CallID: c.call.ID,
		User: userOf(b.data.User), NATSUser: a.natsUser(b.session), Tool: c.call.Name, Outcome: auditOutcome(res)}
	if !b.start.IsZero() {
		rec.DurationMS = time.Since(b.start).Milliseconds()
	}
	rec.Decision = audit.Decision{Behavior: audit.Allow, Mode: a.sessions.Session(b.session).Mode}
	code := ""
	if res.Error != nil {
		code = res.Error.Code
	}
	input := c.input
	if input == nil {
		input = c.call.Input
	}
	switch t := c.target; {
	case t.Code != "":
		rec.Decision.Behavior = audit.Unresolved
	case t.Reset, t.Search, t.Skill, t.Read, t.External != nil:
		rec.Decision.Behavior = audit.Builtin
	case code == bus.CodeInvalidInput:
		rec.Decision.Behavior = audit.Invalid
	case code == bus.CodeLimitExceeded:
		rec.Decision.Behavior = audit.Limit
		rec.Decision.Rule = c.limitRule
	default:
		rec.Decision.Rule = c.rule
		if res.State == bus.StateDenied {
			rec.Decision.Behavior = audit.Deny
		}
		rec.Decision.Cached = bytes.Contains(res.Metadata, []byte(`"`+rcache.MetadataKey+`"`))
	}
	p, err := a.tr.Write(rec, input)
	if err != nil {
		a.lose(rec, nil, err)
		return
	}
	b.mu.Lock()
	b.audits = append(b.audits, p)
	b.mu.Unlock()
}

// audited waits until P_AUDIT holds the audit records of b's calls so far,
// beside the wait for the batch's events, so the reply follows every record
// of the calls it carries. A record not stored within the trail's max_wait
// is counted and logged in full (lose), and the reply goes out: the calls
// ran. A nil trail (audit off) waits for nothing.
func (a *auditTrail) audited(b *batch, landing landingFunc) {
	if a == nil {
		return
	}
	ps := take(&b.mu, &b.audits)
	if len(ps) == 0 {
		return
	}
	ctx, cancel := landing.start(b.ctx)
	defer cancel()
	for _, p := range a.tr.Stored(ctx, ps) {
		a.lose(nil, p.Data(), p.Err())
	}
}

// lose counts an audit record that could not be stored and logs it in
// full (rec, or its encoding data), so that a log shipper still has it.
func (a *auditTrail) lose(rec *audit.Record, data []byte, err error) {
	if a.lost != nil {
		a.lost.Inc()
	}
	if data == nil && rec != nil {
		data, _ = json.Marshal(rec)
	}
	a.log.Error("router: audit record not stored", "record", json.RawMessage(data), "err", err)
}

// recordParked writes the audit record of a parked call that ended (asked
// or external) and waits until P_AUDIT holds it or ctx ends. A nil trail
// records nothing.
func (a *auditTrail) recordParked(ctx context.Context, rec *parked.Record, res bus.Result) {
	if a == nil {
		return
	}
	behavior := audit.External
	if rec.Kind == bus.KindConfirm {
		behavior = audit.Ask
	}
	r := &audit.Record{Time: time.Now().UTC(), Router: a.id, Session: rec.Session, ReplyID: rec.ReplyID, CallID: rec.Call.ID,
		User: userOf(rec.User), NATSUser: a.natsUser(rec.Session), Tool: rec.Call.Name, Outcome: auditOutcome(res),
		DurationMS: time.Since(rec.Created).Milliseconds(),
		Decision: audit.Decision{Behavior: behavior, Mode: a.sessions.Session(rec.Session).Mode, Rule: rec.Reason,
			Approver: rec.AnsweredBy, AnsweredAt: rec.AnsweredAt}}
	// Stored before the call's result is recorded and its batch goes on
	// (answers.complete): a parked call ends at a person's pace, so the
	// round trip is not worth overlapping.
	p, err := a.tr.Write(r, rec.Call.Input)
	a.land(ctx, r, p, err)
}

// land waits until P_AUDIT holds p, the write of rec, or ctx ends.
func (a *auditTrail) land(ctx context.Context, rec *audit.Record, p *audit.Pending, err error) {
	if err != nil {
		a.lose(rec, nil, err)
		return
	}
	for _, p := range a.tr.Stored(ctx, []*audit.Pending{p}) {
		a.lose(rec, p.Data(), p.Err())
	}
}

// natsUser is the NATS user whose credentials alone may publish in
// session: its bound agent user (docs/security.md); "" when the router is
// open or the session unbound (then any agent or operator may have).
func (a *auditTrail) natsUser(session string) string {
	if a.ids == nil {
		return ""
	}
	if _, bound := a.ids.UserOf(session); bound {
		return "session-" + session
	}
	return ""
}

func auditOutcome(res bus.Result) audit.Outcome {
	o := audit.Outcome{State: res.State}
	if res.Error != nil {
		o.Code = res.Error.Code
	}
	return o
}

// unboundCaller is the one caller every unbound session's refusals count
// against: any agent, the facade or the operator may publish there, and a
// session id is the sender's to vary, so one bound for all of them keeps a
// flood from filling the trail.
const unboundCaller = "unbound"

// refusedWait bounds the wait for a refusal's record to be stored.
const refusedWait = 5 * time.Second

// refused records a batch or tools query of session refused whole before
// any call ran (docs/guardrails.md "Audit trail"): a denied user claim,
// bad_request, bad_event. The caller is who may publish in the session:
// its bound agent user, or every unbound session's callers together. At
// most audit.RefusalBurst records per caller and minute; the refusals past
// that are counted, in toolbus_audit_refusals_suppressed_total and in the
// caller's next record (suppressed). Refusals that are not the caller's
// doing (busy, unavailable, internal) are not recorded here.
func (a *auditTrail) refused(ctx context.Context, session, replyID, kind string, err error) {
	if a == nil {
		return
	}
	if !bus.ValidID(session) {
		// The shared agent may publish on any token (P.call.x%y): such a
		// refusal is recorded under no session, the token quoted (issue
		// 26, held-out attack: it escaped the trail), and counted with
		// every unbound session's.
		if len(session) > 128 {
			session = session[:128]
		}
		kind, session = fmt.Sprintf("%s in session %q", kind, session), ""
	}
	var be *bus.Error
	if !errors.As(err, &be) {
		return
	}
	switch be.Code {
	case bus.CodeBadEvent, bus.CodeBadRequest, bus.CodeDenied, bus.CodeLimitExceeded:
	default:
		return
	}
	natsUser := a.natsUser(session)
	ok, suppressed := a.refusals.Take(cmp.Or(natsUser, unboundCaller), time.Now())
	if !ok {
		if a.suppressed != nil {
			a.suppressed.Inc()
		}
		return
	}
	if !bus.ValidID(replyID) {
		replyID = ""
	}
	rec := &audit.Record{Time: time.Now().UTC(), Router: a.id, Session: session, ReplyID: replyID, NATSUser: natsUser,
		Decision: audit.Decision{Behavior: audit.Refused, Rule: kind + ": " + be.Message}, Outcome: audit.Outcome{State: bus.StateError, Code: be.Code},
		Suppressed: suppressed}
	if a.ids != nil {
		rec.User, _ = a.ids.UserOf(session)
	}
	ctx, cancel := context.WithTimeout(ctx, refusedWait)
	defer cancel()
	p, err := a.tr.WriteRefusal(rec)
	a.land(ctx, rec, p, err)
}

// refusedRequest records the refusal of a request on subject, P.<kind>.<session>
// (e its event, when it decoded), as refused does.
func (a *auditTrail) refusedRequest(ctx context.Context, subj bus.Subjects, subject, kind string, e *bus.Event, err error) {
	session, ok := subj.Token(subject, kind)
	if !ok {
		return
	}
	replyID := ""
	if e != nil {
		replyID = e.ID
	}
	what := "batch"
	if kind == "tools" {
		what = "tools query"
	}
	a.refused(ctx, session, replyID, what, err)
}
