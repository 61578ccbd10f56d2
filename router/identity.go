package router

import (
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/bus"
)

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
// (docs/protocol.md 3.1). Without identities the router is open and the
// claim stands. With them, a bound session runs as its bound user: no
// claim takes it, the same claim is accepted, a different one is refused;
// an unbound session runs as no user, and a claim there is refused, since
// no credential backs it. A refusal is a denied *bus.Error and nothing
// runs.
// identities checks a batch's or query's claimed user against the
// session's credentials (Config.Identities; nil: open router).
type identities struct{ ids Identities }

func (x identities) identify(session string, claimed json.RawMessage) (json.RawMessage, error) {
	if x.ids == nil {
		return claimed, nil
	}
	user, bound := x.ids.UserOf(session)
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
