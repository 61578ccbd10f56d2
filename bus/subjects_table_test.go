package bus_test

import (
	"strings"
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
		{"Ask", s.Handoffs.Ask("s1"), "toolbus.ask.s1", "ask", "s1"},
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
		{"Register", s.Workers.Register("echo"), "toolbus.register.echo", "register", "echo"},
		{"RegisterGroup", s.Workers.RegisterGroup("ops"), "toolbus.register.group.ops", "", ""},
		{"SharedRegister", s.Workers.SharedRegister(), "toolbus.register", "", ""},
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

// TestRegistrationSubjects pins how a router reads a registration subject
// (docs/protocol.md 7.1, 1.12): the tool of P.register.<tool>, the group of
// P.register.group.<group>, the shared P.register of 1.11, and nothing for
// a subject that names no valid tool or group.
func TestRegistrationSubjects(t *testing.T) {
	w := bus.NewSubjects("acme").Workers
	for _, tc := range []struct {
		subject, name     string
		group, shared, ok bool
	}{
		{"acme.register.greet", "greet", false, false, true},
		{"acme.register.group", "group", false, false, true}, // a tool named group
		{"acme.register.group.ops", "ops", true, false, true},
		{"acme.register", "", false, true, true},
		{"acme.registers.greet", "", false, false, false},
		{"acme.register.greet.x", "", false, false, false},
		{"acme.register.group.ops.x", "", false, false, false},
		{"acme.register.*", "", false, false, false},
		{"acme.register.>", "", false, false, false},
		{"acme.register.", "", false, false, false},
		{"acme.register.group.", "", false, false, false},
		{"acme.register." + strings.Repeat("a", 65), "", false, false, false},
		{"toolbus.register.greet", "", false, false, false},
		{"acme.exec.greet", "", false, false, false},
	} {
		name, group, shared, ok := w.Registration(tc.subject)
		if name != tc.name || group != tc.group || shared != tc.shared || ok != tc.ok {
			t.Errorf("Registration(%q) = %q, %v, %v, %v; want %q, %v, %v, %v", tc.subject, name, group, shared, ok, tc.name, tc.group, tc.shared, tc.ok)
		}
	}
}

// TestQuestionTool pins the names only a bridge may park on P.ask.<session>
// (docs/protocol.md 12, 1.17), and which a router refuses on P.call.
func TestQuestionTool(t *testing.T) {
	for name, want := range map[string]bool{
		"mcp__q__elicit": true, "mcp__a__b__elicit": true, "mcp__q_x__elicit": true,
		"mcp____elicit": false, "mcp__elicit": false, "mcp__q__ask": false, "q__elicit": false,
		"mcp__q__elicit_": false, "MCP__q__elicit": false, "elicit": false, "": false,
	} {
		if got := bus.QuestionTool(name); got != want {
			t.Errorf("QuestionTool(%q) = %v, want %v", name, got, want)
		}
	}
}
