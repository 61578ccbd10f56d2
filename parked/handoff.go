package parked

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// The record is the handoff (docs/protocol.md 6.2, 1.6): a handler or
// approver that follows the handoff reads the parked records of its kind
// and tool from P_parked's stream through a router, which turns each into
// the request event (Request); a request is also published on
// P.external.<tool> / P.confirm.<tool> for live subscribers, with core NATS,
// which stores nothing. Nothing is written for the handoff and nothing is
// deleted once the call settles: the record's next revision replaces the
// parked one in the stream (the bucket keeps one revision per key).

// handoff publishes parked calls' requests for live subscribers.
type handoff struct {
	publish func(*nats.Msg) error // nil: no live requests
	subj    bus.Subjects
	source  string
	log     *slog.Logger
}

// live publishes r's request on P.external.<tool> or P.confirm.<tool>,
// unless the caller executes the tool itself (request-scoped). A lost
// publish loses nothing: followers read the record.
func (h handoff) live(r *Record) {
	if h.publish == nil || r.RequestScoped {
		return
	}
	m, err := requestMsg(r, h.source, h.subj)
	if err == nil {
		err = h.publish(m)
	}
	if err != nil {
		h.log.Debug("parked: live handoff request not published", "key", r.Key(), "err", err)
	}
}

// confirmRequest is bus.HandoffRequest with suggested_rules always present.
type confirmRequest struct {
	bus.HandoffRequest
	SuggestedRules []bus.Rule `json:"suggested_rules"`
}

// requestMsg is r's io.toolbus.external.request or io.toolbus.confirm.request
// (docs/protocol.md 6.2) on its live subject, from source.
func requestMsg(r *Record, source string, subj bus.Subjects) (*nats.Msg, error) {
	typ, subject := bus.TypeExternalReq, subj.Handoffs.External(r.Call.Name)
	req := bus.HandoffRequest{Call: r.Call, InputDigest: r.InputDigest, User: r.User, Context: r.Context, Subject: r.Subject, Expires: r.Expires}
	var data any = req
	if r.Kind == bus.KindConfirm {
		typ, subject = bus.TypeConfirmReq, subj.Handoffs.Confirm(r.Call.Name)
		req.Reason = r.Reason
		rules := r.SuggestedRules
		if rules == nil {
			rules = []bus.Rule{}
		}
		data = confirmRequest{HandoffRequest: req, SuggestedRules: rules}
	}
	e, err := bus.NewEvent(typ, source, data)
	if err != nil {
		return nil, err
	}
	e.SessionID, e.ReplyID, e.ToolCallID, e.Subject = r.Session, r.ReplyID, r.Call.ID, r.Call.ID
	e.ExpiryTime = r.Expires.Format(time.RFC3339Nano)
	return e.Msg(subject)
}

// A Want is what a follower of the handoff may see: the records parked
// for kind (bus.KindExternal or bus.KindConfirm) of tool ("" for every
// tool). It is the trust boundary of the follow relay (docs/security.md):
// a handler of one tool never gets another tool's or kind's requests.
type Want struct {
	Kind, Tool string
}

// Request turns the value of a P_parked entry into the request event a
// follower of w gets, on its live subject, from source; false when the
// entry is not for w: not a call record, not parked (answered, done,
// expired, cancelled, a delete marker), request-scoped (its caller runs
// it), or of another kind or tool; a kind other than external and
// confirm has no requests.
func Request(value []byte, w Want, subj bus.Subjects, source string) (*nats.Msg, bool) {
	if len(value) == 0 || w.Kind != bus.KindExternal && w.Kind != bus.KindConfirm {
		return nil, false
	}
	var r Record
	if json.Unmarshal(value, &r) != nil || r.Status != bus.ParkParked || r.RequestScoped ||
		r.Kind != w.Kind || w.Tool != "" && r.Call.Name != w.Tool || !bus.ValidName(r.Call.Name) {
		return nil, false
	}
	m, err := requestMsg(&r, source, subj)
	return m, err == nil
}
