package security_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/security"
)

// TestFacadeFollowsListings: the facade's login may subscribe to every
// subject its listing watch follows (client.WatchListings), for any
// prefix, and that is all it may read of those buckets: no consumer.
func TestFacadeFollowsListings(t *testing.T) {
	for _, prefix := range []string{"", "acme"} {
		users, err := security.Users(security.Spec{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := security.Lookup(users, security.RoleFacade)
		for _, subj := range client.ListingSubjects(bus.NewSubjects(prefix)) {
			if !slices.Contains(f.Permissions.Subscribe, subj) {
				t.Errorf("prefix %q: the facade may not subscribe to %s: %v", prefix, subj, f.Permissions.Subscribe)
			}
		}
		for _, p := range f.Permissions.Publish {
			if strings.Contains(p, "CONSUMER") {
				t.Errorf("prefix %q: the facade may publish %s", prefix, p)
			}
		}
	}
}

// TestFacadeAnswers: the facade may answer the bridged servers' question
// tools it is given (mcp__<server>__elicit) and no other external tool;
// anything else in FacadeAnswers is refused. It may ask the bridges for
// resources, which an unconfined worker (a bridge) may serve.
func TestFacadeAnswers(t *testing.T) {
	users, err := security.Users(security.Spec{FacadeAnswers: []string{"mcp__t__elicit"}})
	if err != nil {
		t.Fatal(err)
	}
	f, ok := security.Lookup(users, security.RoleFacade)
	if !ok {
		t.Fatal("no facade user")
	}
	var answers []string
	for _, p := range f.Permissions.Publish {
		if strings.HasPrefix(p, "toolbus.answer.") {
			answers = append(answers, p)
		}
	}
	if !slices.Equal(answers, []string{"toolbus.answer.mcp__t__elicit"}) {
		t.Fatalf("facade answers %v", answers)
	}
	users, _ = security.Users(security.Spec{})
	f, _ = security.Lookup(users, security.RoleFacade)
	for _, p := range f.Permissions.Publish {
		if strings.HasPrefix(p, "toolbus.answer.") {
			t.Fatalf("the default facade answers %s", p)
		}
	}
	if !slices.Contains(f.Permissions.Publish, "toolbus.resources.>") {
		t.Errorf("the facade cannot ask the bridges for resources: %v", f.Permissions.Publish)
	}
	w, _ := security.Lookup(users, security.RoleWorker)
	if !slices.Contains(w.Permissions.Subscribe, "toolbus.resources.>") {
		t.Errorf("the worker (a bridge) cannot serve resources: %v", w.Permissions.Subscribe)
	}
	users, _ = security.Users(security.Spec{WorkerTools: []string{"echo"}})
	w, _ = security.Lookup(users, security.RoleWorker)
	if slices.Contains(w.Permissions.Subscribe, "toolbus.resources.>") {
		t.Errorf("a confined worker serves resources: %v", w.Permissions.Subscribe)
	}
	for _, bad := range []string{"deploy", "mcp__t__ask", "mcp____elicit", "*", "mcp__t.x__elicit"} {
		if _, err := security.Users(security.Spec{FacadeAnswers: []string{bad}}); err == nil {
			t.Errorf("FacadeAnswers %q accepted", bad)
		}
	}
}

// TestBridgeAsks: the bridge login is the unconfined worker plus asking
// (P.ask.*, docs/protocol.md 12, 1.17), calling for sampling, cancelling
// and the events of every session, under its own inbox; no other role but
// the router may publish on P.ask, for any prefix, and no role but the
// router on a session's events (1.18).
func TestBridgeAsks(t *testing.T) {
	for _, prefix := range []string{"", "acme"} {
		s := bus.NewSubjects(prefix)
		users, err := security.Users(security.Spec{Prefix: prefix, Sessions: []string{"s1"}, WorkerTools: []string{"echo"},
			Handlers: []security.Handler{{Name: "h", Tools: []string{"t"}}}})
		if err != nil {
			t.Fatal(err)
		}
		b, ok := security.Lookup(users, security.RoleBridge)
		if !ok {
			t.Fatal("no bridge user")
		}
		for _, p := range []string{s.Handoffs.Ask("*"), s.Call("*"), s.Cancel("*"), s.Workers.Register("*"), "_INBOX.router.>"} {
			if !slices.Contains(b.Permissions.Publish, p) {
				t.Errorf("prefix %q: the bridge may not publish %s: %v", prefix, p, b.Permissions.Publish)
			}
		}
		for _, sub := range []string{s.Events("*"), s.Workers.Exec("*"), s.All("resources"), "_INBOX.bridge.>"} {
			if !slices.Contains(b.Permissions.Subscribe, sub) {
				t.Errorf("prefix %q: the bridge may not subscribe to %s: %v", prefix, sub, b.Permissions.Subscribe)
			}
		}
		if b.InboxPrefix != "_INBOX.bridge" || slices.Contains(b.Permissions.Subscribe, "_INBOX.worker.>") || len(b.Tools) != 0 {
			t.Errorf("prefix %q: the bridge's inbox %s, subscriptions %v, tools %v", prefix, b.InboxPrefix, b.Permissions.Subscribe, b.Tools)
		}
		for _, u := range users {
			for _, p := range u.Permissions.Publish {
				if u.Role != security.RoleRouter && (strings.HasPrefix(p, s.Prefix+".ask.") && u.Role != security.RoleBridge || p == s.Prefix+".>" || p == ">") {
					t.Errorf("prefix %q: %s may publish %s", prefix, u.Name, p)
				}
				// A session's events are the routers' alone (1.18): a
				// worker's or bridge's progress goes through a router.
				if u.Role != security.RoleRouter && strings.HasPrefix(p, s.Prefix+".events") {
					t.Errorf("prefix %q: %s may publish %s", prefix, u.Name, p)
				}
			}
		}
	}
}
