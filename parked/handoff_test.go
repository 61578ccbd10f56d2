package parked

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestRequestFilter: the handoff relay's trust boundary (docs/security.md).
// A follower of a kind and tool gets the request of a record in status
// parked of that kind and tool only; every other value of P_parked —
// another kind, another tool, a settled or request-scoped call, a
// continuation, a delete marker, garbage — gives nothing.
func TestRequestFilter(t *testing.T) {
	rec := func(edit func(*Record)) []byte {
		r := record("s1", "r1", "c1")
		r.Status, r.Subject = bus.ParkParked, "toolbus.answer.deploy"
		if edit != nil {
			edit(r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cont, _ := json.Marshal(&Batch{Session: "s1", ReplyID: "r1", Phase: PhaseParked, Waiting: []string{"c1"}})
	external, confirm := deployOf(bus.KindExternal), deployOf(bus.KindConfirm)
	for _, tc := range []struct {
		name    string
		value   []byte
		want    Want
		subject string // "" for none
	}{
		{"its kind and tool", rec(nil), external, "toolbus.external.deploy"},
		{"every tool of its kind", rec(nil), Want{Kind: bus.KindExternal}, "toolbus.external.deploy"},
		{"a confirmation", rec(func(r *Record) { r.Kind = bus.KindConfirm }), confirm, "toolbus.confirm.deploy"},
		{"another kind", rec(nil), confirm, ""},
		{"another kind, every tool", rec(nil), Want{Kind: bus.KindConfirm}, ""},
		{"another tool", rec(nil), Want{Kind: bus.KindExternal, Tool: "pick"}, ""},
		{"answered", rec(func(r *Record) { r.Status = bus.ParkAnswered }), external, ""},
		{"done", rec(func(r *Record) { r.Status = bus.ParkDone }), external, ""},
		{"expired", rec(func(r *Record) { r.Status = bus.ParkExpired }), external, ""},
		{"cancelled", rec(func(r *Record) { r.Status = bus.ParkCancelled }), external, ""},
		{"request-scoped", rec(func(r *Record) { r.RequestScoped = true }), external, ""},
		{"a bad tool name", rec(func(r *Record) { r.Call.Name = "deploy.x" }), Want{Kind: bus.KindExternal}, ""},
		{"a queued kind", rec(func(r *Record) { r.Kind = bus.KindQueued }), Want{Kind: bus.KindQueued}, ""},
		{"a continuation", cont, external, ""},
		{"a delete marker", nil, external, ""},
		{"garbage", []byte(`{"status":`), external, ""},
		{"not an object", []byte(`"parked"`), external, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := Request(tc.value, tc.want, subj, source)
			if ok != (tc.subject != "") {
				t.Fatalf("request %v, want %v", ok, tc.subject != "")
			}
			if !ok {
				return
			}
			e, err := bus.Decode(m)
			if err != nil || m.Subject != tc.subject || e.ToolCallID != "c1" || e.SessionID != "s1" || e.Source != source {
				t.Fatalf("request on %s: %+v %v", m.Subject, e, err)
			}
		})
	}
}
