package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// register sends one raw io.toolbus.register with data and returns the ack.
func (e *env) register(t *testing.T, data string) bus.RegisterAck {
	t.Helper()
	ev := newEvent(t, bus.TypeRegister, json.RawMessage(data))
	reply := e.request(t, eventMsg(t, e.client.Subjects().Workers.SharedRegister(), ev)) // the 1.11 subject, still served
	if reply.Type != bus.TypeRegisterAck {
		t.Fatalf("reply %s: %s", reply.Type, reply.Data)
	}
	var ack bus.RegisterAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		t.Fatal(err)
	}
	return ack
}

// listedDefs returns, from one tools listing (toolbus format) of every
// router that serves, the definition of tool listed to session, nil for a
// router that does not list it.
func (e *env) listedDefs(t *testing.T, session, tool string) map[string]*bus.ToolDef {
	t.Helper()
	out := map[string]*bus.ToolDef{}
	query := func() *bus.Event { return newEvent(t, bus.TypeToolsQuery, struct{}{}) }
	e.everyRouter(t, query, e.client.Subjects().Tools(session), func(ev *bus.Event) error {
		var list bus.ToolsList
		if err := ev.DataAs(&list); err != nil {
			return fmt.Errorf("%s: %w", ev.Type, err)
		}
		id := strings.TrimPrefix(ev.Source, "toolbus/router/")
		out[id] = nil
		for _, raw := range list.Tools {
			var d bus.ToolDef
			if err := json.Unmarshal(raw, &d); err != nil {
				return err
			}
			if d.Name == tool {
				out[id] = &d
			}
		}
		return nil
	})
	return out
}

// checkAck fails unless each name in want is accepted (true) or rejected
// with a reason (false), and nothing else is in the ack.
func checkAck(t *testing.T, ack bus.RegisterAck, want map[string]bool) {
	t.Helper()
	if len(ack.Accepted)+len(ack.Rejected) != len(want) {
		t.Errorf("ack has %d entries for %d definitions: %s", len(ack.Accepted)+len(ack.Rejected), len(want), jsonOf(ack))
	}
	for name, accepted := range want {
		t.Run(name, func(t *testing.T) {
			var inAccepted bool
			for _, a := range ack.Accepted {
				inAccepted = inAccepted || a == name
			}
			var rej *bus.Rejection
			for i, r := range ack.Rejected {
				if r.Name == name {
					rej = &ack.Rejected[i]
				}
			}
			switch {
			case accepted && (!inAccepted || rej != nil):
				t.Fatalf("%q not accepted: %s", name, jsonOf(ack))
			case !accepted && (inAccepted || rej == nil):
				t.Fatalf("%q not rejected: %s", name, jsonOf(ack))
			case !accepted && strings.TrimSpace(rej.Reason) == "":
				t.Fatalf("%q rejected without a reason", name)
			case !accepted:
				t.Logf("%s rejected: %s", name, rej.Reason)
			}
		})
	}
}

// TestRegisterRejections: definitions that cannot be served safely are
// rejected with a reason, one by one; the valid ones of the same
// registration are accepted.
func TestRegisterRejections(t *testing.T) {
	e := newEnv(t, 1)
	def := func(name, schema string) string {
		return `{"name":` + jsonOf(name) + `,"description":"d","input_schema":` + schema + `}`
	}
	obj := `{"type":"object","properties":{"q":{"type":"string"}}}`
	tests := []struct {
		name, def string
		accepted  bool
	}{
		{"good_tool", def("good_tool", obj), true},
		{"good_defs_ref", def("good_defs_ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`), true},
		{"bad_type_keyword", def("bad_type_keyword", `{"type":"object","properties":{"a":{"type":"nope"}}}`), false},
		{"bad_min_length", def("bad_min_length", `{"type":"object","properties":{"a":{"type":"string","minLength":"three"}}}`), false},
		{"bad_pattern", def("bad_pattern", `{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`), false},
		{"string_schema", def("string_schema", `{"type":"string"}`), false},
		{"array_schema", def("array_schema", `{"type":"array","items":{}}`), false},
		{"untyped_schema", def("untyped_schema", `{"properties":{}}`), false},
		{"schema_not_object", def("schema_not_object", `[1,2]`), false},
		// A definition without input_schema is rejected (docs/protocol.md 7.4).
		{"no_schema", `{"name":"no_schema","description":"d"}`, false},
		{"external_ref", def("external_ref", `{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`), false},
		{"external_ref_root", def("external_ref_root", `{"type":"object","$ref":"other.json#/x"}`), false},
		{"bad.name", def("bad.name", obj), false},
		{"bad name", def("bad name", obj), false},
		{strings.Repeat("n", 65), def(strings.Repeat("n", 65), obj), false},
	}
	var defs []string
	want := map[string]bool{}
	for _, tt := range tests {
		defs = append(defs, tt.def)
		want[tt.name] = tt.accepted
	}
	ack := e.register(t, `{"worker":"raw-worker","tools":[`+strings.Join(defs, ",")+`]}`)
	checkAck(t, ack, want)
	for id, st := range e.statuses(t) {
		for name, accepted := range want {
			if _, ok := toolStatus(st, name); ok != accepted {
				t.Errorf("router %s lists %q in its status: %v, want %v", id, name, ok, accepted)
			}
		}
	}
}

// TestRegisterConflict: a different definition of a tool that another
// worker still serves is rejected; the same definition is accepted (the
// workers share the load); once the first worker has left, the new
// definition replaces the old one.
func TestRegisterConflict(t *testing.T) {
	e := newEnv(t, 2)
	live := bus.ToolDef{Name: "shared", Description: "The original.", InputSchema: objectSchema(`{"q":{"type":"string"}}`),
		ConcurrencySafe: true, Permission: bus.PermissionAllow}
	w := e.addWorker(func(w *worker.Worker) {
		handle(t, w, live, func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("original"), nil })
	})
	e.waitLive("shared")

	same := live
	same.Defaults()
	changed := same
	changed.Description = "A different tool under the same name."
	reg := func(worker string, d bus.ToolDef) string {
		return `{"worker":"` + worker + `","tools":[` + jsonOf(d) + `]}`
	}
	t.Run("different definition", func(t *testing.T) {
		checkAck(t, e.register(t, reg("other-worker", changed)), map[string]bool{"shared": false})
	})
	t.Run("same definition", func(t *testing.T) {
		checkAck(t, e.register(t, reg("twin-worker", same)), map[string]bool{"shared": true})
	})
	t.Run("listed definition unchanged", func(t *testing.T) {
		for id, def := range e.listedDefs(t, "conflict", "shared") {
			if def == nil || def.Description != live.Description {
				t.Fatalf("router %s lists %+v", id, def)
			}
		}
		wantSuccess(t, e.call(t, "conflict", []bus.Call{{ID: "c1", Name: "shared"}}).Results[0], "original")
	})

	t.Run("after the live workers left", func(t *testing.T) {
		if err := w.Drain(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		// twin-worker is the raw registration above; it leaves too.
		if ack := e.register(t, `{"worker":"twin-worker","leaving":true}`); len(ack.Rejected) != 0 {
			t.Fatalf("leaving: %s", jsonOf(ack))
		}
		e.waitGone(t, "shared")
		checkAck(t, e.register(t, reg("other-worker", changed)), map[string]bool{"shared": true})
		e.waitLive("shared")
		testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
			// other-worker beats, as a worker does, so that its tool stays
			// live (and listed) however slow the machine.
			checkAck(t, e.register(t, reg("other-worker", changed)), map[string]bool{"shared": true})
			for id, def := range e.listedDefs(t, "conflict", "shared") {
				if def == nil || def.Description != changed.Description {
					return fmt.Errorf("router %s lists %+v, want the new definition", id, def)
				}
			}
			return nil
		})
	})
}

// TestRegistrationSeenAtOnceByEveryRouter: once a worker's registration is
// acknowledged, a call through any router finds the tool, although only
// one router took the registration and the others learn of it through
// their watches a moment later.
func TestRegistrationSeenAtOnceByEveryRouter(t *testing.T) {
	e := newEnv(t, 3)
	e.addWorker(func(w *worker.Worker) { // waits for the ack only
		handle(t, w, bus.ToolDef{Name: "fresh", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return textResult("here"), nil
		})
	})
	for i := range 12 { // the queue group spreads them over the routers
		wantSuccess(t, e.call(t, fmt.Sprint("fresh-", i), []bus.Call{{ID: "c1", Name: "fresh"}}).Results[0], "here")
	}
}
