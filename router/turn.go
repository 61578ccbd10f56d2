package router

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
)

// turn is a checked batch: one model turn's calls as the agent sent them,
// with the attributes that travel with every one of them.
type turn struct {
	session  string
	replyID  string
	trace    [2]string // traceparent, tracestate
	expiry   string
	deadline time.Time // from expirytime; zero when absent
	data     bus.Batch
	req      *groups.Request
}

// checkTurn checks a decoded io.toolbus.call.batch (its session already
// checked against the subject): the reply id, the calls, the expiry and
// the request. Errors are bad_event or bad_request.
func checkTurn(e *bus.Event, lim Limits) (turn, error) {
	if !bus.ValidID(e.ID) {
		return turn{}, bus.Errorf(bus.CodeBadEvent, "id (the reply id) %q must match ^[A-Za-z0-9_-]{1,128}$", e.ID)
	}
	var data bus.Batch
	if err := data.FromEvent(e); err != nil {
		return turn{}, err
	}
	n := len(data.Calls)
	if n == 0 {
		return turn{}, bus.Errorf(bus.CodeBadRequest, "the batch has no calls")
	}
	if n > lim.MaxCalls {
		return turn{}, bus.Errorf(bus.CodeBadRequest, "the batch has %d calls; at most %d are allowed", n, lim.MaxCalls)
	}
	switch data.Events {
	case "", bus.EventsBatch, bus.EventsCalls:
	default:
		return turn{}, bus.Errorf(bus.CodeBadRequest, "events %q must be \"batch\" (the default) or \"calls\"", data.Events)
	}
	// A few calls are checked for duplicates against the ones before
	// them; a map (an allocation) only past that.
	var seen map[string]struct{}
	if n > 8 {
		seen = make(map[string]struct{}, n)
	}
	for i, c := range data.Calls {
		if !bus.ValidID(c.ID) {
			return turn{}, bus.Errorf(bus.CodeBadEvent, "call id %q must match ^[A-Za-z0-9_-]{1,128}$", c.ID)
		}
		if dupCall(data.Calls[:i], seen, c.ID) {
			return turn{}, bus.Errorf(bus.CodeBadRequest, "call id %q appears twice in the batch", c.ID)
		}
		if len(c.Input) > lim.MaxInputBytes {
			return turn{}, bus.Errorf(bus.CodeBadRequest, "call %s: its input is %d bytes; at most %d are allowed", c.ID, len(c.Input), lim.MaxInputBytes)
		}
		if seen != nil {
			seen[c.ID] = struct{}{}
		}
	}
	return newTurn(e.SessionID, e.ID, [2]string{e.TraceParent, e.TraceState}, e.ExpiryTime, data)
}

// dupCall reports whether id is the id of one of the calls before it:
// those in seen when there is a map, else those in before.
func dupCall(before []bus.Call, seen map[string]struct{}, id string) bool {
	if seen != nil {
		_, dup := seen[id]
		return dup
	}
	for _, c := range before {
		if c.ID == id {
			return true
		}
	}
	return false
}

// newTurn builds a turn from checked parts: a new batch's, or those a
// continuation kept.
func newTurn(session, replyID string, trace [2]string, expiry string, data bus.Batch) (turn, error) {
	t := turn{session: session, replyID: replyID, trace: trace, expiry: expiry, data: data}
	if expiry != "" {
		d, err := time.Parse(time.RFC3339Nano, expiry)
		if err != nil {
			return turn{}, bus.Errorf(bus.CodeBadEvent, "expirytime %q is not RFC 3339", expiry)
		}
		t.deadline = d
	}
	var err error
	if t.req, err = groups.CheckRequest(data.Request); err != nil {
		return turn{}, err
	}
	return t, nil
}

// Identities binds sessions to the toolbus users whose credentials alone
// may publish in them (docs/security.md "Identities"): NATS permissions
// let only the session's own agent user (and the operator) publish on
// P.call.<s> and P.tools.<s>, so a batch there comes from that user.
// security.Bindings implements it.
type Identities interface {
	// UserOf returns the toolbus user session is bound to, and whether
	// it is bound at all.
	UserOf(session string) (user string, bound bool)
}

// identify returns the user a batch or tools.query of session runs as
// (docs/protocol.md 3.1), by the session's credentials (ids, from
// Config.Identities). Open (ids nil), the claim stands. A bound session runs as
// its bound user (no claim or the same one; another is refused); an
// unbound session runs as no user, and a claim there is refused, since no
// credential backs it. A refusal is a denied *bus.Error.
func identify(ids Identities, session string, claimed json.RawMessage) (json.RawMessage, error) {
	if ids == nil {
		return claimed, nil
	}
	user, bound := ids.UserOf(session)
	none := userOf(claimed) == ""
	switch {
	case bound && (none || isString(claimed) && userOf(claimed) == user):
		b, _ := json.Marshal(user)
		return b, nil
	case bound:
		return nil, bus.Errorf(bus.CodeDenied, "user %s is not the one that connected: session %s is bound to user %q by its credentials; send no user, or that one", compact(claimed), session, user)
	case none:
		return nil, nil
	}
	return nil, bus.Errorf(bus.CodeDenied, "user %s needs a credential: session %s is bound to no user (bind one with `toolbus security agent --session %s --user <user>`), so its batches run as no user; send none",
		compact(claimed), session, session)
}

func isString(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil
}

// compact is a claim as an error message quotes it, bounded.
func compact(raw json.RawMessage) string {
	s := userOf(raw)
	if isString(raw) {
		s = fmt.Sprintf("%q", s)
	}
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
