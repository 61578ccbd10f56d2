package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
)

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
	caller := a.natsUser(session)
	if caller == "" {
		caller = unboundCaller
	}
	ok, suppressed := a.refusals.Take(caller, time.Now())
	if !ok {
		if a.suppressed != nil {
			a.suppressed.Inc()
		}
		return
	}
	if !bus.ValidID(replyID) {
		replyID = ""
	}
	rec := &audit.Record{Time: time.Now().UTC(), Router: a.id, Session: session, ReplyID: replyID, NATSUser: a.natsUser(session),
		Decision: audit.Decision{Behavior: audit.Refused, Rule: kind + ": " + be.Message}, Outcome: audit.Outcome{State: bus.StateError, Code: be.Code},
		Suppressed: suppressed}
	if a.ids != nil {
		rec.User, _ = a.ids.UserOf(session)
	}
	p, err := a.tr.WriteRefusal(rec)
	if err != nil {
		a.lose(rec, nil, err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, refusedWait)
	defer cancel()
	for _, p := range a.tr.Stored(ctx, []*audit.Pending{p}) {
		a.lose(nil, p.Data(), p.Err())
	}
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
