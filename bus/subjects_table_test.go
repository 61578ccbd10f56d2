package bus_test

import (
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestSubjectsTable pins every name of docs/protocol.md section 2 at the
// default prefix, one row per builder, and that Token reads back the
// session or tool of each P.<kind>.<token> subject.
func TestSubjectsTable(t *testing.T) {
	s := bus.NewSubjects("")
	for _, tc := range []struct {
		name, got, want, kind, token string // kind and token: what Token reads back ("" for none)
	}{
		{"Call", s.Call("s1"), "toolbus.call.s1", "call", "s1"},
		{"Tools", s.Tools("s1"), "toolbus.tools.s1", "tools", "s1"},
		{"Cancel", s.Cancel("s1"), "toolbus.cancel.s1", "cancel", "s1"},
		{"Events", s.Events("s1"), "toolbus.events.s1", "events", "s1"},
		{"Exec", s.Workers.Exec("echo"), "toolbus.exec.echo", "exec", "echo"},
		{"External", s.Handoffs.External("echo"), "toolbus.external.echo", "external", "echo"},
		{"Confirm", s.Handoffs.Confirm("echo"), "toolbus.confirm.echo", "confirm", "echo"},
		{"Answer", s.Handoffs.Answer("echo"), "toolbus.answer.echo", "answer", "echo"},
		{"Approve", s.Handoffs.Approve("echo"), "toolbus.approve.echo", "approve", "echo"},
		{"Replay", s.Replay("s1"), "toolbus.replay.s1", "replay", "s1"},
		{"Handoff", s.Handoffs.Follow("confirm", "echo"), "toolbus.handoff.confirm.echo", "", ""},
		{"HandoffAll", s.Handoffs.Follow("external", ""), "toolbus.handoff.external", "handoff", "external"},
		{"Register", s.Workers.Register(), "toolbus.register", "", ""},
		{"Admin", s.Admin("tools.delete"), "toolbus.admin.tools.delete", "", ""},
		{"Outputs", s.Outputs("s1"), "toolbus.outputs.s1", "outputs", "s1"},
		{"Work", s.Workers.Work("slow"), "toolbus.work.slow", "work", "slow"},
		{"Result", s.Workers.Result("slow"), "toolbus.result.slow", "result", "slow"},
		{"All", s.All("events"), "toolbus.events.>", "", ""},
		{"RouterQueue", s.RouterQueue(), "toolbus-router", "", ""},
		{"ExecQueue", s.Workers.ExecQueue("echo"), "toolbus-exec-echo", "", ""},
		{"WorkConsumer", s.Workers.WorkConsumer("slow"), "toolbus-work-slow", "", ""},
		{"Bucket", s.Bucket(bus.BucketParked), "toolbus_parked", "", ""},
		{"ObjectStore", s.ObjectStore(bus.ObjectOutputs), "toolbus_outputs", "", ""},
		{"Stream", s.Stream(bus.StreamEvents), "TOOLBUS_EVENTS", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("%s = %q, want %q", tc.name, tc.got, tc.want)
			}
			if tc.kind == "" {
				return
			}
			if tok, ok := s.Token(tc.got, tc.kind); !ok || tok != tc.token {
				t.Fatalf("Token(%q, %q) = %q, %v; want %q", tc.got, tc.kind, tok, ok, tc.token)
			}
		})
	}
}
