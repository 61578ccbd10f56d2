package conformance

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestPullHeartbeats: protocol 1.9, sections 3.4 and 6.2. A router's
// ready says "heartbeat": true; a consumer.next with heartbeat_ms gets a
// message with only a header "Status: 100" every heartbeat_ms while the
// pull waits with nothing to send, from JetStream itself (replay) or from
// the router (the handoff), then its closing 408. heartbeat_ms below 500,
// above half of expires_ms, or with expires_ms 0 is bad_request, and
// nothing is relayed.
func TestPullHeartbeats(t *testing.T) {
	s := start(t)
	for _, f := range []struct {
		name, subject, create, ready string
		attrs                        map[string]string
	}{
		{"replay", s.subj("replay", "hb-1"), "io.toolbus.events.replay", "io.toolbus.events.replay.ready", map[string]string{"sessionid": "hb-1"}},
		{"handoff", s.subj("handoff", "external", "hb_tool"), "io.toolbus.handoff.follow", "io.toolbus.handoff.ready", nil},
	} {
		t.Run(f.name, func(t *testing.T) {
			ready := s.request(t, out{typ: f.create, attrs: f.attrs, data: M{}}.msg(t, f.subject))
			if ready.Type != f.ready {
				t.Fatalf("%s: %s %s", f.create, ready.Type, ready.Data)
			}
			var r struct {
				Consumer  string `json:"consumer"`
				Heartbeat bool   `json:"heartbeat"`
			}
			dataAs(t, ready, &r)
			if !r.Heartbeat {
				t.Errorf("ready %s: heartbeat is not true", ready.Data)
			}
			defer s.send(t, out{typ: "io.toolbus.consumer.stop", attrs: f.attrs, data: M{"consumer": r.Consumer}}.msg(t, f.subject))
			pull := func(data M) *nats.Subscription {
				t.Helper()
				inbox := nats.NewInbox()
				sub, err := s.nc.SubscribeSync(inbox)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Unsubscribe() })
				m := out{typ: "io.toolbus.consumer.next", attrs: f.attrs, data: data}.msg(t, f.subject)
				m.Reply = inbox
				s.send(t, m)
				return sub
			}

			sub := pull(M{"consumer": r.Consumer, "batch": 1, "expires_ms": 2000, "heartbeat_ms": 500})
			beats := 0
			for {
				m, err := sub.NextMsg(bound)
				if err != nil {
					t.Fatalf("after %d heartbeats: %v", beats, err)
				}
				st := m.Header.Get("Status")
				if st == "100" && len(m.Data) == 0 {
					beats++
					continue
				}
				if st != "408" {
					t.Fatalf("after %d heartbeats: status %q, data %s", beats, st, m.Data)
				}
				break
			}
			// Four fit in the wait; a slow scheduler may cost one or two.
			if beats < 2 || beats > 4 {
				t.Errorf("%d heartbeats in a 2 s wait at 500 ms, want 2 to 4", beats)
			}

			for _, bad := range []M{
				{"consumer": r.Consumer, "expires_ms": 2000, "heartbeat_ms": 499},
				{"consumer": r.Consumer, "expires_ms": 2000, "heartbeat_ms": 1001},
				{"consumer": r.Consumer, "expires_ms": 0, "heartbeat_ms": 500},
				{"consumer": r.Consumer, "expires_ms": 2000, "heartbeat_ms": -1},
			} {
				m, err := pull(bad).NextMsg(bound)
				if err != nil {
					t.Fatalf("%v: %v", bad, err)
				}
				e := decodeEvent(t, m)
				var refusal struct {
					Code string `json:"code"`
				}
				_ = json.Unmarshal(e.Data, &refusal)
				if e.Type != "io.toolbus.error" || refusal.Code != "bad_request" {
					t.Errorf("%v: %s %s, want bad_request", bad, e.Type, e.Data)
				}
			}
		})
	}
}
