package router

import (
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestHandoffWant: P.handoff.<kind>[.<tool>] grants exactly the parked
// records of that kind and tool (every tool without one), for the two
// kinds; anything else grants nothing.
func TestHandoffWant(t *testing.T) {
	r := &replays{wire: &wire{subj: bus.NewSubjects("")}}
	for subject, want := range map[string]string{
		"toolbus.handoff.confirm.deploy": "confirm.deploy",
		"toolbus.handoff.confirm":        "confirm.",
		"toolbus.handoff.external.pick":  "external.pick",
		"toolbus.handoff.external":       "external.",
		"toolbus.handoff.events.s1":      "",
		"toolbus.handoff.queued.s1":      "",
		"toolbus.handoff.confirm.a.b":    "",
		"toolbus.handoff.confirm.*":      "",
		"toolbus.handoff.confirm.>":      "",
		"toolbus.handoff.":               "",
		"toolbus.handoff":                "",
		"other.handoff.confirm.deploy":   "",
	} {
		got, ok := r.handoffWant(subject)
		if ok != (want != "") || ok && got.Kind+"."+got.Tool != want {
			t.Errorf("handoffWant(%q) = %+v %v, want %q", subject, got, ok, want)
		}
	}
}

// TestReplyAllowed: the router answers inboxes, never the JetStream API,
// buckets, object stores, system subjects, its own protocol's subjects or
// its own inbox prefix.
func TestReplyAllowed(t *testing.T) {
	for reply, want := range map[string]bool{
		"":                                     true,
		"_INBOX.session-s1.abc.1":              true,
		"_INBOX.abc":                           true,
		"my.custom.inbox.x":                    true,
		"$JS.API.STREAM.DELETE.TOOLBUS_EVENTS": false,
		"$KV.toolbus_tools.greet":              false,
		"$O.toolbus_skills.C.x":                false,
		"$SYS.REQ.SERVER.PING":                 false,
		"toolbus.confirm.deploy":               false,
		"toolbus.events.s1":                    false,
		"_INBOX.router.x":                      false,
		"_INBOX.routerx.y":                     true,
	} {
		if got := replyAllowedFor(reply, "toolbus", "_INBOX.router"); got != want {
			t.Errorf("replyAllowed(%q) = %v, want %v", reply, got, want)
		}
	}
}
