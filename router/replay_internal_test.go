package router

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

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

// TestPullOf: io.toolbus.consumer.next's bounds (docs/protocol.md 3.4,
// 1.9) and the JetStream pull it relays. heartbeat_ms is absent, or 500
// to half of expires_ms: nats-server refuses a heartbeat of more than half
// the wait, and 500 ms bounds what one pull costs in heartbeats (at most 60
// in the longest wait; docs/security.md, a heartbeat as amplification).
func TestPullOf(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		q    bus.ConsumerNext
		want jsPull // zero: bad_request
	}{
		{bus.ConsumerNext{}, jsPull{Batch: defaultBatch, NoWait: true}},
		{bus.ConsumerNext{Batch: 256, ExpiresMS: 5000}, jsPull{Batch: 256, Expires: 5000 * ms}},
		{bus.ConsumerNext{Batch: 1, ExpiresMS: 5000, HeartbeatMS: 1000}, jsPull{Batch: 1, Expires: 5000 * ms, Heartbeat: 1000 * ms}},
		{bus.ConsumerNext{ExpiresMS: 1000, HeartbeatMS: 500}, jsPull{Batch: defaultBatch, Expires: 1000 * ms, Heartbeat: 500 * ms}},
		{bus.ConsumerNext{ExpiresMS: 30000, HeartbeatMS: 15000}, jsPull{Batch: defaultBatch, Expires: 30000 * ms, Heartbeat: 15000 * ms}},
		{bus.ConsumerNext{ExpiresMS: 5000, HeartbeatMS: 499}, jsPull{}},   // a heartbeat every millisecond: amplification
		{bus.ConsumerNext{ExpiresMS: 5000, HeartbeatMS: 1}, jsPull{}},     // likewise
		{bus.ConsumerNext{ExpiresMS: 5000, HeartbeatMS: 2501}, jsPull{}},  // more than half the wait
		{bus.ConsumerNext{ExpiresMS: 999, HeartbeatMS: 500}, jsPull{}},    // likewise
		{bus.ConsumerNext{HeartbeatMS: 500}, jsPull{}},                    // no wait: nothing to beat for
		{bus.ConsumerNext{ExpiresMS: 5000, HeartbeatMS: -500}, jsPull{}},  // negative
		{bus.ConsumerNext{ExpiresMS: 30001, HeartbeatMS: 1000}, jsPull{}}, // past the longest wait
		{bus.ConsumerNext{Batch: 257, ExpiresMS: 5000}, jsPull{}},
		{bus.ConsumerNext{Batch: -1}, jsPull{}},
		{bus.ConsumerNext{ExpiresMS: -1}, jsPull{}},
	} {
		q := tc.q
		got, err := pullOf(&q)
		if tc.want == (jsPull{}) {
			var be *bus.Error
			if !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
				t.Errorf("pullOf(%+v) = %+v %v, want bad_request", tc.q, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("pullOf(%+v) = %+v %v, want %+v", tc.q, got, err, tc.want)
		}
	}
	// What goes to JetStream: nats-server's JSApiConsumerGetNextRequest.
	q := bus.ConsumerNext{Batch: 2, ExpiresMS: 5000, HeartbeatMS: 1000}
	p, _ := pullOf(&q)
	if b, _ := json.Marshal(p); string(b) != `{"batch":2,"expires":5000000000,"idle_heartbeat":1000000000}` {
		t.Errorf("relayed pull %s", b)
	}
}
