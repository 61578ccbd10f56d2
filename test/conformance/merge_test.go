package conformance

import (
	"slices"
	"testing"
)

func extTool(name, desc string, props M, required ...string) M {
	schema := M{"type": "object", "properties": props}
	if len(required) > 0 {
		schema["required"] = required
	}
	return M{"name": name, "description": desc, "input_schema": schema}
}

// mergeFixture: backend tools ping and pick (basic) and hidden (in the
// inactive meta group g).
func mergeFixture(t *testing.T) (*sys, *worker) {
	s := start(t)
	w := s.startWorker(t, []M{def("ping"), def("pick"), def("hidden", M{"groups": []string{"g"}})},
		[]M{{"name": "g", "description": "G.", "scope": "meta"}}, echo)
	s.waitListed(t, "probe", "ping", "pick", "reset_tools")
	return s, w
}

// TestExternalToolWinsOverBackend: a request-scoped external tool always
// wins over a backend tool of the same name, even one in an inactive group
// (docs/protocol.md 4.3); merge_external_priority is the default.
func TestExternalToolWinsOverBackend(t *testing.T) {
	s, w := mergeFixture(t)
	for _, mode := range []string{"", "merge_external_priority"} {
		t.Run("mode="+mode, func(t *testing.T) {
			req := M{"external_tools": []M{extTool("pick", "Caller's pick.", M{}), extTool("hidden", "Caller's hidden.", M{})}}
			if mode != "" {
				req["merge_mode"] = mode
			}
			l := s.list(t, "s1", M{"request": req, "format": "anthropic"})
			if got := names(t, l.Tools); !slices.Equal(got, []string{"ping", "reset_tools", "pick", "hidden"}) {
				t.Fatalf("tools %v, want [ping reset_tools pick hidden]", got)
			}
			if string(member(t, l.Tools[2], "description")) != `"Caller's pick."` {
				t.Errorf("pick is the backend one: %s", l.Tools[2])
			}
			r := s.call(t, "s1", "r"+mode, M{"calls": []Call{{ID: "c1", Name: "pick"}, {ID: "c2", Name: "hidden"}}, "request": req})
			if len(r.Results) != 0 || len(r.Parked) != 2 {
				t.Fatalf("reply %s: want both calls parked for the caller", jsonOf(r))
			}
			for _, p := range r.Parked {
				if p.Kind != "external" {
					t.Errorf("%s parked as %s, want external", p.ID, p.Kind)
				}
			}
		})
	}
	if w.execs.Load() != 0 {
		t.Fatal("a backend tool ran in place of the caller's")
	}
}

// TestExternalOnly hides every backend tool, reset_tools included; calling
// one is unknown_tool; other requests still see the backend.
func TestExternalOnly(t *testing.T) {
	s, w := mergeFixture(t)
	req := M{"merge_mode": "external_only", "external_tools": []M{extTool("ask_user", "Ask.", M{})}}
	if got := names(t, s.list(t, "s1", M{"request": req}).Tools); !slices.Equal(got, []string{"ask_user"}) {
		t.Fatalf("tools %v, want only ask_user", got)
	}
	r := s.call(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "ping"}, {ID: "c2", Name: "reset_tools", Input: M{"g": true}}},
		"request": req})
	wantFailure(t, r.Results[0], "error", "unknown_tool", "ToolNotFoundError: The tool named 'ping' doesn't exist.")
	wantFailure(t, r.Results[1], "error", "unknown_tool", "ToolNotFoundError: The tool named 'reset_tools' doesn't exist.")
	if w.execs.Load() != 0 {
		t.Fatal("a hidden backend tool ran")
	}
	if got := names(t, s.list(t, "s1", nil).Tools); !slices.Equal(got, []string{"ping", "pick", "reset_tools"}) {
		t.Fatalf("a later default request sees %v", got)
	}
	// external_only without external tools: nothing at all.
	if got := names(t, s.list(t, "s1", M{"request": M{"merge_mode": "external_only"}}).Tools); len(got) != 0 {
		t.Fatalf("tools %v, want none", got)
	}
}

// TestAgentOnly: agent_only lists the backend; with external tools it is
// bad_request "agent_only cannot include external tools", on a query too.
func TestAgentOnly(t *testing.T) {
	s, _ := mergeFixture(t)
	if got := names(t, s.list(t, "s1", M{"request": M{"merge_mode": "agent_only"}}).Tools); !slices.Equal(got, []string{"ping", "pick", "reset_tools"}) {
		t.Fatalf("tools %v", got)
	}
	req := M{"merge_mode": "agent_only", "external_tools": []M{extTool("ask_user", "Ask.", M{})}}
	wantError(t, s.listRaw(t, "s1", M{"request": req}), "bad_request", "agent_only cannot include external tools")
	wantError(t, s.callRaw(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "ping"}}, "request": req}),
		"bad_request", "agent_only cannot include external tools")
}

// TestRequestScopedExternalCall: calling a request-scoped external tool
// parks it with kind "external" and subject P.answer.<tool>; the caller
// answers it; these calls count as concurrency-safe (docs/protocol.md 4.3, 6).
func TestRequestScopedExternalCall(t *testing.T) {
	s, _ := mergeFixture(t)
	req := M{"external_tools": []M{extTool("pick_file", "Pick.", M{"dir": M{"type": "string"}}, "dir")}}
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", M{"calls": []Call{
		{ID: "c1", Name: "pick_file", Input: M{"dir": "/tmp"}},
		{ID: "c2", Name: "ping"}, // safe: runs beside the parked call
	}, "request": req})
	wantIDs(t, "reply", r.Results, "c2")
	wantSuccess(t, r.Results[0], "ping ran")
	if len(r.Parked) != 1 || r.Parked[0].ID != "c1" || r.Parked[0].Kind != "external" || r.Parked[0].Name != "pick_file" ||
		r.Parked[0].Subject != "toolbus.answer.pick_file" {
		t.Fatalf("parked %s", jsonOf(r.Parked))
	}
	parked := ev.until(typeIs(tCallParked, "r1"))
	var pd struct {
		Calls []Parked `json:"calls"`
	}
	dataAs(t, parked[len(parked)-1], &pd)
	if len(pd.Calls) != 1 || pd.Calls[0].ID != "c1" || !jsonEqual(pd.Calls[0].Input, M{"dir": "/tmp"}) {
		t.Fatalf("call.parked %s", parked[len(parked)-1].Data)
	}
	s.answerOK(t, "pick_file", "s1", "r1", "c1", textAnswer("success", "/tmp/a.txt"))
	done := checkBatchEvents(t, append(parked, ev.until(doneOf("r1"))...), "s1", "r1", "c1", "c2")
	wantSuccess(t, done[0], "/tmp/a.txt")
	wantSuccess(t, done[1], "ping ran")
}

// TestRequestScopedExternalHoldsBackUnsafeCall: an unsafe call after a
// parked external call waits, reported as "queued", and runs after the answer.
func TestRequestScopedExternalHoldsBackUnsafeCall(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("deploy", M{"concurrency_safe": false}))
	req := M{"external_tools": []M{extTool("ask_user", "Ask.", M{})}}
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "ask_user"}, {ID: "c2", Name: "deploy"}}, "request": req})
	if len(r.Results) != 0 || len(r.Parked) != 2 || r.Parked[0].Kind != "external" || r.Parked[1].Kind != "queued" ||
		r.Parked[1].Subject != "toolbus.answer.deploy" {
		t.Fatalf("reply %s: want c1 external and c2 queued", jsonOf(r))
	}
	if w.execs.Load() != 0 {
		t.Fatal("the queued call ran before the answer")
	}
	s.answerOK(t, "ask_user", "s1", "r1", "c1", textAnswer("success", "yes"))
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1", "c2")
	wantSuccess(t, done[1], "deploy ran")
}

// TestRequestScopedExternalInputValidated: an external tool's input is
// validated against its schema before it parks (docs/protocol.md 4.3).
func TestRequestScopedExternalInputValidated(t *testing.T) {
	s := start(t)
	req := M{"external_tools": []M{extTool("pick_file", "Pick.", M{"dir": M{"type": "string"}}, "dir")}}
	r := s.call(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "pick_file", Input: M{"dir": 3}}}, "request": req})
	wantFailure(t, r.Results[0], "error", "invalid_input", "")
	if len(r.Parked) != 0 {
		t.Fatalf("parked %v", r.Parked)
	}
}
