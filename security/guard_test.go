package security

import (
	"slices"
	"strings"
	"testing"
)

// natsMatch reports whether subject matches the NATS pattern (tokens, *
// and a final >).
func natsMatch(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

func TestNatsMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"P.>", "P.audit.s.t", true}, {"P.audit.*", "P.audit.s.t", false}, {"P.*.s.t", "P.audit.s.t", true},
		{"$JS.API.>", "$JS.API.STREAM.PURGE.P_AUDIT", true}, {"P.events.>", "P.audit.x", false},
	} {
		if got := natsMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("natsMatch(%s, %s) = %v", tc.p, tc.s, got)
		}
	}
}

// TestGuardrailStateOnlyRouters: no role but the router (and the operator,
// who administers the deployment) may publish to the guardrails' state: a
// forged or purged audit record, a decremented counter, a planted cache
// entry (docs/guardrails.md).
func TestGuardrailStateOnlyRouters(t *testing.T) {
	users, err := Users(Spec{Sessions: []string{"s1"}, Handlers: []Handler{{Name: "h", Tools: []string{"t"}}}, AgentAnswers: []string{"pick"}})
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{
		"P.audit.s1.deploy",                 // a forged audit record
		"P.limits.paid.0123abcd.20261201",   // a counter increment (Nats-Incr: -1000)
		"$KV.P_limits.paid.0123abcd",        // a rate's GCRA value
		"$KV.P_rcache.lookup.0123abcd",      // a planted cache entry
		"$JS.API.STREAM.PURGE.P_AUDIT",      // wiping the trail
		"$JS.API.STREAM.MSG.DELETE.P_AUDIT", // deleting one record
		"$JS.API.STREAM.PURGE.P_LIMITS",     // resetting every budget
		"$JS.API.STREAM.UPDATE.KV_P_rcache", // changing the cache bucket
		"$JS.API.STREAM.DELETE.KV_P_limits", // dropping the rates
	}
	for _, u := range users {
		if u.Role == RoleRouter || u.Role == RoleOperator {
			continue
		}
		for _, subj := range forbidden {
			for _, p := range u.Permissions.Publish {
				if natsMatch(p, subj) && !denied(u.Permissions.PublishDeny, subj) {
					t.Errorf("%s (%s) may publish %s through %q", u.Name, u.Role, subj, p)
				}
			}
		}
	}
}

func denied(deny []string, subj string) bool {
	for _, d := range deny {
		if natsMatch(d, subj) {
			return true
		}
	}
	return false
}

// TestPresenceOnlyRouters: no role but the router may put, delete or purge
// a key of the routers' presence (P_routers, docs/protocol.md 8, 1.13), nor
// remove or change the bucket; not the operator either, whose JetStream
// API is otherwise whole. A forged key would keep a dead router present
// (its lone batches never get batch.done); a deleted one makes a live
// router look gone.
func TestPresenceOnlyRouters(t *testing.T) {
	users, err := Users(Spec{Sessions: []string{"s1"}, Handlers: []Handler{{Name: "h", Tools: []string{"t"}}}, AgentAnswers: []string{"pick"},
		FacadeAnswers: []string{"mcp__srv__elicit"}})
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{
		"$KV.toolbus_routers.a1b2c3",                   // a put or a delete marker (the same subject)
		"$JS.API.STREAM.PURGE.KV_toolbus_routers",      // every key, or one (a purge request's filter)
		"$JS.API.STREAM.MSG.DELETE.KV_toolbus_routers", // one renewal
		"$JS.API.STREAM.DELETE.KV_toolbus_routers",     // the bucket
		"$JS.API.STREAM.UPDATE.KV_toolbus_routers",     // its limits
	}
	for _, u := range users {
		if u.Role == RoleRouter {
			continue
		}
		for _, subj := range forbidden {
			for _, p := range u.Permissions.Publish {
				if natsMatch(p, subj) && !denied(u.Permissions.PublishDeny, subj) {
					t.Errorf("%s (%s) may publish %s through %q", u.Name, u.Role, subj, p)
				}
			}
		}
	}
	r, _ := Lookup(users, RoleRouter)
	if !slices.ContainsFunc(r.Permissions.Publish, func(p string) bool { return natsMatch(p, forbidden[0]) }) {
		t.Errorf("the router may not renew its presence: %v", r.Permissions.Publish)
	}
}
