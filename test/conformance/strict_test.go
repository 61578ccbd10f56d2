package conformance

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Strict decoding (docs/protocol.md 7): a member the protocol does not name, in
// a tool definition, a group, a request or an answer, is refused with its
// name.

// wantErrorNaming fails unless e is io.toolbus.error with code whose
// message names member (in quotes).
func wantErrorNaming(t testing.TB, e *Event, code, member string) {
	t.Helper()
	we := wantError(t, e, code, "")
	if !strings.Contains(we.Message, `"`+member+`"`) {
		t.Errorf("error message %q does not name %q", we.Message, member)
	}
}

// TestRegisterMisspeltMembers: each definition with a member docs/protocol.md 7
// does not name is rejected in the ack with a reason that names it; so is
// one without input_schema (or with null); the good one beside them is
// accepted, and no rejected one is listed or stored.
func TestRegisterMisspeltMembers(t *testing.T) {
	s := start(t)
	schema := M{"type": "object", "properties": M{"city": M{"type": "string"}}}
	misspelt := map[string]M{
		"t_parameters":   {"parameters": schema},
		"t_schema":       {"schema": schema},
		"t_inputschema":  {"inputSchema": schema},
		"t_input_schem":  {"input_schem": schema},
		"t_readonly":     {"input_schema": schema, "readonly": true},
		"t_timeout":      {"input_schema": schema, "timeout": 1000},
		"t_group":        {"input_schema": schema, "group": "ops"},
		"t_mcp_name":     {"input_schema": schema, "mcp": M{"server": "fs", "name": "read"}},
		"t_concurrent":   {"input_schema": schema, "concurrent": false},
		"t_retries":      {"input_schema": schema, "retries": 3},
		"t_description_": {"input_schema": schema, "desc": "x"},
	}
	member := map[string]string{"t_parameters": "parameters", "t_schema": "schema", "t_inputschema": "inputSchema",
		"t_input_schem": "input_schem", "t_readonly": "readonly", "t_timeout": "timeout", "t_group": "group", "t_mcp_name": "name",
		"t_concurrent": "concurrent", "t_retries": "retries", "t_description_": "desc"}
	defs := []M{def("good")}
	for name, extra := range misspelt {
		d := M{"name": name, "description": "Misspelt."}
		for k, v := range extra {
			d[k] = v
		}
		defs = append(defs, d)
	}
	defs = append(defs, M{"name": "t_no_schema", "description": "No schema."}, M{"name": "t_null_schema", "input_schema": nil})
	member["t_no_schema"], member["t_null_schema"] = "input_schema", "input_schema"
	w := s.startWorker(t, defs, nil, echo)
	a := decodeAck(t, &Event{Type: tRegisterAck, Source: "toolbus/router/x", Data: w.Ack})
	if !slices.Equal(a.Accepted, []string{"good"}) {
		t.Errorf("accepted %v, want [good]", a.Accepted)
	}
	got := map[string]string{}
	for _, r := range a.Rejected {
		got[r.Name] = r.Reason
	}
	for name, m := range member {
		reason, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s (member %s) not rejected; ack %s", name, m, w.Ack)
		case !strings.Contains(reason, m):
			t.Errorf("%s: reason %q does not name %q", name, reason, m)
		}
	}
	if len(a.Rejected) != len(member) {
		t.Errorf("%d rejections, want %d: %s", len(a.Rejected), len(member), w.Ack)
	}
	if listed := names(t, s.list(t, "s1", nil).Tools); !slices.Equal(listed, []string{"good"}) {
		t.Errorf("listed %v, want [good]", listed)
	}
	for name := range member {
		if v := s.kvGet(t, "toolbus_tools", name); v != nil {
			t.Errorf("rejected %s is stored: %s", name, v)
		}
	}
}

// TestRegisterGroupUnknownMember: a register whose group has an unknown
// member is answered bad_request naming it, and registers nothing: neither
// the group nor the tools beside it.
func TestRegisterGroupUnknownMember(t *testing.T) {
	s := start(t)
	o := out{typ: tRegister, data: M{"worker": "w-js", "groups": []M{
		{"name": "fine", "description": "Fine.", "scope": "meta"},
		{"name": "ops", "description": "Ops.", "scope": "meta", "tools": []string{"deploy"}},
	}, "tools": []M{def("deploy", M{"groups": []string{"ops"}}), def("plain")}},
		attrs: map[string]string{"source": "toolbus/worker/w-js"}}
	wantErrorNaming(t, s.request(t, o.msg(t, s.subj("register"))), "bad_request", "tools")
	for _, key := range []string{"deploy", "plain"} {
		if v := s.kvGet(t, "toolbus_tools", key); v != nil {
			t.Errorf("tool %s stored: %s", key, v)
		}
	}
	for _, key := range []string{"fine", "ops"} {
		if v := s.kvGet(t, "toolbus_groups", key); v != nil {
			t.Errorf("group %s stored: %s", key, v)
		}
	}
	if v := s.kvGet(t, "toolbus_workers", "plain.w-js"); v != nil {
		t.Errorf("worker liveness stored: %s", v)
	}
	// groups.put is just as strict.
	wantErrorNaming(t, s.admin(t, "groups.put", "", M{"name": "g", "description": "G.", "scope": "meta", "activeByDefault": true}),
		"bad_request", "activeByDefault")
}

// TestBatchRequestUnknownMember: a batch whose request has an unknown
// member (or an external tool with one) is refused with bad_request naming
// it, and runs nothing.
func TestBatchRequestUnknownMember(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("ping"))
	tool := M{"name": "pick_file", "description": "Pick.", "input_schema": M{"type": "object", "properties": M{}}}
	for _, tc := range []struct {
		name    string
		request M
		member  string
	}{
		{"tools", M{"tools": []M{tool}}, "tools"},
		{"mode", M{"mode": "external_only"}, "mode"},
		{"mergeMode", M{"mergeMode": "agent_only"}, "mergeMode"},
		{"parameters in an external tool", M{"external_tools": []M{{"name": "pick", "description": "d", "parameters": M{"type": "object"}}}}, "parameters"},
		{"schema in an external tool", M{"merge_mode": "merge_external_priority", "external_tools": []M{tool, {"name": "b", "schema": M{"type": "object"}}}}, "schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := s.watch(t, "s1")
			replyID := nextID("r")
			e := s.callRaw(t, "s1", replyID, M{"calls": []Call{{ID: "c1", Name: "ping"}}, "request": tc.request})
			wantErrorNaming(t, e, "bad_request", tc.member)
			s.list(t, "s1", nil) // a round trip through the router: any event would be out by now
			if es := ev.pending(); len(es) != 0 {
				t.Errorf("a refused batch published %s", eventsString(es))
			}
		})
	}
	if n := w.execs.Load(); n != 0 {
		t.Errorf("a refused batch ran %d calls", n)
	}
	// The same request spelled right runs.
	r := s.call(t, "s1", "r-ok", M{"calls": []Call{{ID: "c1", Name: "ping"}}, "request": M{"external_tools": []M{tool}}})
	wantSuccess(t, r.Results[0], "ping ran")
}

// TestToolsQueryRequestUnknownMember: a tools query's request is decoded
// just as strictly.
func TestToolsQueryRequestUnknownMember(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("ping"))
	wantErrorNaming(t, s.listRaw(t, "s1", M{"format": "openai", "request": M{"tools": []M{}}}), "bad_request", "tools")
	wantErrorNaming(t, s.listRaw(t, "s1", M{"request": M{"external_tools": []M{{"name": "x", "inputSchema": M{"type": "object"}}}}}),
		"bad_request", "inputSchema")
	l := s.list(t, "s1", M{"request": M{"merge_mode": "external_only", "external_tools": []M{{"name": "x", "description": "X.", "input_schema": M{"type": "object"}}}}})
	if got := names(t, l.Tools); !slices.Equal(got, []string{"x"}) {
		t.Errorf("listed %v, want [x]", got)
	}
}

// TestAnswerUnknownMember: an answer with an unknown member (or a member
// of the other kind of answer) is refused with bad_request naming it; the
// call stays parked, and a correct answer afterwards is accepted.
func TestAnswerUnknownMember(t *testing.T) {
	t.Run("external", func(t *testing.T) {
		s := externalFixture(t)
		ev := s.watch(t, "s1")
		r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}))
		if len(r.Parked) != 1 {
			t.Fatalf("parked %s", jsonOf(r.Parked))
		}
		for member, data := range map[string]M{
			"result":    {"state": "success", "result": "picked"},
			"txt":       {"state": "success", "output": []M{{"type": "text", "txt": "picked"}}},
			"confirmed": {"state": "success", "output": []Block{{Type: "text", Text: "x"}}, "confirmed": true},
			"status":    {"status": "success", "output": []Block{{Type: "text", Text: "x"}}},
		} {
			wantErrorNaming(t, s.answer(t, "handoff", "s1", "r1", "c1", data), "bad_request", member)
		}
		if got := s.parkedList(t, "s1"); len(got) != 1 {
			t.Fatalf("after refused answers, parked.list %s", jsonOf(got))
		}
		s.answerOK(t, "handoff", "s1", "r1", "c1", textAnswer("success", "picked"))
		done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
		wantSuccess(t, done[0], "picked")
	})
	t.Run("confirmation", func(t *testing.T) {
		s, _ := confirmFixture(t)
		ev := s.watch(t, "s1")
		r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "deploy", Input: M{"env": "staging"}}))
		if len(r.Parked) != 1 || r.Parked[0].Kind != "confirm" {
			t.Fatalf("parked %s", jsonOf(r.Parked))
		}
		for member, data := range map[string]M{
			"approved": {"approved": true},
			"remember": {"confirmed": true, "remember": true},
			"match":    {"confirmed": true, "rules": []M{{"tool": "deploy", "match": "x"}}},
			"output":   {"confirmed": true, "output": []Block{{Type: "text", Text: "x"}}},
		} {
			wantErrorNaming(t, s.answer(t, "deploy", "s1", "r1", "c1", data), "bad_request", member)
		}
		s.answerOK(t, "deploy", "s1", "r1", "c1", M{"confirmed": true})
		done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
		wantSuccess(t, done[0], `deploy ran with {"env":"staging"}`)
	})
}

// TestSameToolTwoLanguages: two workers whose definitions of a tool differ
// only in member order, white space and explicit defaults share it (the
// definitions are equal as JSON values once defaults are applied), and
// both serve its calls.
func TestSameToolTwoLanguages(t *testing.T) {
	s := start(t)
	var mu sync.Mutex
	served := map[string]int{}
	h := func(c *execCall) {
		mu.Lock()
		served[c.w.id]++
		mu.Unlock()
		c.text("4°C")
	}
	goDef := M{"name": "weather", "description": "Weather.", "permission": "allow", "input_schema": M{"type": "object",
		"properties": M{"city": M{"type": "string"}, "days": M{"type": "integer", "minimum": 1}}, "required": []string{"city"}}}
	a := s.startWorker(t, []M{goDef}, nil, h)
	b := s.startWorker(t, []M{goDef}, nil, h)
	// encoding/json sorts map keys; the second worker's definition is also
	// sent written by hand, every object's members in another order and
	// with explicit defaults, as a worker in another language may.
	jsDef := json.RawMessage(`{"permission": "allow", "timeout_ms": 300000, "max_attempts": 1, "concurrency_safe": true, "output_schema": null,
		"input_schema": {"required": ["city"], "type": "object", "properties": {"days": {"minimum": 1, "type": "integer"}, "city": {"type": "string"}}},
		"description": "Weather.", "name": "weather"}`)
	for _, ack := range []json.RawMessage{a.Ack, b.register(t, M{"worker": b.id, "tools": []json.RawMessage{jsDef}}).Data} {
		got := decodeAck(t, &Event{Type: tRegisterAck, Source: "toolbus/router/x", Data: ack})
		if !slices.Equal(got.Accepted, []string{"weather"}) || len(got.Rejected) != 0 {
			t.Fatalf("ack %s", ack)
		}
	}
	for range 40 {
		r := s.call(t, "s1", nextID("r"), callsData(Call{ID: "c1", Name: "weather", Input: M{"city": "Oslo"}}))
		wantSuccess(t, r.Results[0], "4°C")
		mu.Lock()
		both := served[a.id] > 0 && served[b.id] > 0
		mu.Unlock()
		if both {
			return
		}
	}
	t.Errorf("calls were not shared by both workers: %v", served)
}

// TestSessionActivateDefaultsToActive: session.activate without "active"
// activates the groups (docs/protocol.md 9).
func TestSessionActivateDefaultsToActive(t *testing.T) {
	s := start(t)
	s.adminOK(t, "groups.put", "", M{"name": "admin", "description": "Operator tools.", "scope": "external"})
	s.startWorker(t, []M{def("purge", M{"groups": []string{"admin"}})}, nil, echo)
	if got := names(t, s.list(t, "s1", nil).Tools); slices.Contains(got, "purge") {
		t.Fatalf("before session.activate, listed %v", got)
	}
	s.adminOK(t, "session.activate", "s1", M{"groups": []string{"admin"}})
	s.waitListed(t, "s1", "purge")
	s.adminOK(t, "session.activate", "s1", M{"groups": []string{"admin"}, "active": false})
	if got := names(t, s.list(t, "s1", nil).Tools); slices.Contains(got, "purge") {
		t.Fatalf("after active false, listed %v", got)
	}
}

// TestProgressReachesOnlyItsSession: a hand-written worker publishes
// io.toolbus.call.progress itself on P.events.<sessionid of the exec>,
// with sessionid, replyid, toolcallid and subject = the call id; an agent
// watching another session never sees it, even while both sessions call
// the tool at once.
func TestProgressReachesOnlyItsSession(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		c.progress(1, "started "+c.ev.SessionID)
		c.progress(2, "halfway "+c.ev.SessionID)
		c.text("done")
	}, def("long"))
	sessions := []string{"pa", "pb", "pc"}
	watches := map[string]*events{}
	for _, sess := range sessions {
		watches[sess] = s.watch(t, sess)
	}
	var wg sync.WaitGroup
	for _, sess := range sessions {
		wg.Go(func() {
			for i := range 3 {
				r := s.call(t, sess, "r"+string(rune('0'+i)), callsData(Call{ID: "c1", Name: "long"}, Call{ID: "c2", Name: "long"}))
				if len(r.Results) != 2 {
					t.Errorf("%s: results %s", sess, jsonOf(r.Results))
				}
			}
		})
	}
	wg.Wait()
	for _, sess := range sessions {
		es := watches[sess].until(doneOf("r2"))
		progress := 0
		for _, e := range es {
			if e.SessionID != sess {
				t.Errorf("on %s's subject: an event of session %q: %s %s", sess, e.SessionID, e.Type, e.Data)
			}
			if e.Type != tCallProg {
				continue
			}
			progress++
			if e.ReplyID == "" || e.ToolCallID == "" || e.Subject != e.ToolCallID {
				t.Errorf("progress attributes: replyid %q toolcallid %q subject %q", e.ReplyID, e.ToolCallID, e.Subject)
			}
			var p struct {
				Seq    int     `json:"seq"`
				Output []Block `json:"output"`
			}
			dataAs(t, e, &p)
			if len(p.Output) != 1 || !strings.HasSuffix(p.Output[0].Text, " "+sess) {
				t.Errorf("on %s's subject, progress %s", sess, e.Data)
			}
		}
		if progress != 3*2*2 {
			t.Errorf("%s: %d progress events, want 12", sess, progress)
		}
	}
}
