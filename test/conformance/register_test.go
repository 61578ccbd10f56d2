package conformance

import (
	"slices"
	"strings"
	"testing"
)

// registerAck is the data of io.toolbus.register.ack.
type registerAck struct {
	Accepted []string `json:"accepted"`
	Rejected []struct {
		Name   string `json:"name"`
		Reason string `json:"reason"`
	} `json:"rejected"`
}

func decodeAck(t testing.TB, e *Event) registerAck {
	t.Helper()
	if e.Type != tRegisterAck {
		t.Fatalf("register reply %s %s", e.Type, e.Data)
	}
	fromRouter(t, e)
	wantKeys(t, "register.ack data", e.Data, "accepted", "rejected")
	var a registerAck
	dataAs(t, e, &a)
	return a
}

// TestRegisterAckAndRejections: {"accepted": [names], "rejected": [{name,
// reason}]}; a schema that does not compile, is not an object schema or
// refers to an external $ref is rejected with a reason (docs/protocol.md 7).
func TestRegisterAckAndRejections(t *testing.T) {
	s := start(t)
	w := s.startWorker(t, []M{def("good")}, nil, echo)
	if a := decodeAck(t, &Event{Type: tRegisterAck, Source: "toolbus/router/x", Data: w.Ack}); !slices.Equal(a.Accepted, []string{"good"}) || len(a.Rejected) != 0 {
		t.Fatalf("first ack %s", w.Ack)
	}
	bad := map[string]M{
		"no_compile":   {"type": "object", "properties": M{"a": M{"type": "nope"}}},
		"not_object":   {"type": "string"},
		"array_schema": {"type": "array", "items": M{}},
		"external_ref": {"type": "object", "properties": M{"a": M{"$ref": "https://example.com/schemas/a.json"}}},
		"not_json_obj": {"type": "object", "properties": 7},
	}
	defs := []M{def("good"), def("also_good", M{"input_schema": M{"type": "object", "properties": M{"x": M{"$ref": "#/$defs/x"}},
		"$defs": M{"x": M{"type": "string"}}}})}
	for name, schema := range bad {
		defs = append(defs, def(name, M{"input_schema": schema}))
	}
	a := decodeAck(t, w.register(t, M{"worker": w.id, "tools": defs}))
	if !slices.Equal(a.Accepted, []string{"good", "also_good"}) {
		t.Errorf("accepted %v, want [good also_good]", a.Accepted)
	}
	var rejected []string
	for _, r := range a.Rejected {
		rejected = append(rejected, r.Name)
		if r.Reason == "" {
			t.Errorf("%s rejected without a reason", r.Name)
		}
	}
	slices.Sort(rejected)
	want := []string{"array_schema", "external_ref", "no_compile", "not_json_obj", "not_object"}
	if !slices.Equal(rejected, want) {
		t.Errorf("rejected %v, want %v", rejected, want)
	}
	if got := names(t, s.list(t, "s1", nil).Tools); slices.ContainsFunc(got, func(n string) bool { return slices.Contains(want, n) }) {
		t.Errorf("a rejected tool is listed: %v", got)
	}
}

// TestRegisterConflict: a definition that differs from a live one of the
// same name is rejected; an identical one is accepted (a second worker).
func TestRegisterConflict(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("shared", M{"description": "One."}))
	other := s.startWorker(t, []M{def("shared", M{"description": "One."})}, nil, echo)
	if a := decodeAck(t, &Event{Type: tRegisterAck, Source: "toolbus/router/x", Data: other.Ack}); !slices.Equal(a.Accepted, []string{"shared"}) {
		t.Fatalf("identical definition: %s", other.Ack)
	}
	a := decodeAck(t, other.register(t, M{"worker": "w-third", "tools": []M{def("shared", M{"description": "Two."})}}))
	if len(a.Accepted) != 0 || len(a.Rejected) != 1 || a.Rejected[0].Name != "shared" || a.Rejected[0].Reason == "" {
		t.Fatalf("conflicting definition: %+v", a)
	}
	l := s.list(t, "s1", M{"format": "anthropic"})
	if string(member(t, l.Tools[0], "description")) != `"One."` {
		t.Errorf("listed %s", l.Tools[0])
	}
}

// TestLeavingRemovesAtOnce: {"worker", "leaving": true} removes the worker
// at once: the next listing no longer shows its tools.
func TestLeavingRemovesAtOnce(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("brief"))
	ack := w.leave(t)
	if ack.Type != tRegisterAck {
		t.Fatalf("leave reply %s %s", ack.Type, ack.Data)
	}
	if got := names(t, s.list(t, "s1", nil).Tools); slices.Contains(got, "brief") {
		t.Fatalf("listed right after leaving: %v", got)
	}
}

// TestMissedHeartbeats: a worker that stops beating is gone after three
// missed beats.
func TestMissedHeartbeats(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("fading"))
	w.halt() // stop beating, without leaving
	s.waitUnlisted(t, "s1", "fading")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "fading"}))
	wantFailure(t, r.Results[0], "error", "unavailable", "")
}

// TestExternalToolsStayUntilDeleted: definitions of external tools need no
// live worker; they stay listed until P.admin.tools.delete.
func TestExternalToolsStayUntilDeleted(t *testing.T) {
	s := start(t)
	w := s.startWorker(t, []M{def("handoff", M{"external": true})}, nil, echo)
	s.waitListed(t, "s1", "handoff")
	w.leave(t)
	if got := names(t, s.list(t, "s1", nil).Tools); !slices.Contains(got, "handoff") {
		t.Fatalf("external tool gone with its registering worker: %v", got)
	}
	s.adminOK(t, "tools.delete", "", M{"name": "handoff"})
	if got := names(t, s.list(t, "s1", nil).Tools); slices.Contains(got, "handoff") {
		t.Fatalf("external tool listed after tools.delete: %v", got)
	}
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}))
	wantFailure(t, r.Results[0], "error", "unknown_tool", "ToolNotFoundError: The tool named 'handoff' doesn't exist.")
}

// TestRegisterGroups: groups in a registration are defined; listed with
// their scope; tools without groups belong to basic.
func TestRegisterGroups(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("free"), def("gated", M{"groups": []string{"ops"}})},
		[]M{{"name": "ops", "description": "Ops tools.", "instructions": "Be careful.", "scope": "external", "active_by_default": false}}, echo)
	s.waitListed(t, "s1", "free")
	l := s.list(t, "s1", nil)
	if got := names(t, l.Tools); !slices.Equal(got, []string{"free"}) {
		t.Fatalf("tools %v", got)
	}
	if len(l.Groups) != 2 || l.Groups[1] != (GroupInfo{Name: "ops", Description: "Ops tools.", Scope: "external"}) {
		t.Fatalf("groups %+v", l.Groups)
	}
}

// TestRegisterBadEnvelope: a registration that is not an
// io.toolbus.register is bad_event.
func TestRegisterBadEnvelope(t *testing.T) {
	s := start(t)
	o := out{typ: tToolsQuery, data: M{"worker": "w1", "tools": []M{def("x")}}}
	wantError(t, s.request(t, o.msg(t, "toolbus.register")), "bad_event", "")
	if got := names(t, s.list(t, "s1", nil).Tools); len(got) != 0 {
		t.Fatalf("a refused registration listed %v", got)
	}
}

// TestRegisterOnToolSubject (protocol 1.12, 7.1): a tool registers on
// P.register.<tool> with its own definition; a definition of another tool
// or a group there is rejected and changes nothing; a group registers on
// P.register.group.<group> (accepted names it); a leave there is acked
// empty, and a subject naming no valid tool is bad_event.
func TestRegisterOnToolSubject(t *testing.T) {
	s := start(t)
	send := func(subject string, data M) *Event {
		t.Helper()
		return s.request(t, out{typ: tRegister, data: data, attrs: map[string]string{"source": "toolbus/worker/w-subj"}}.msg(t, subject))
	}
	a := decodeAck(t, send(s.subj("register", "subj_a"), M{"worker": "w-subj", "tools": []M{def("subj_a")}, "inflight": M{"subj_a": []string{}}}))
	if !slices.Equal(a.Accepted, []string{"subj_a"}) || len(a.Rejected) != 0 {
		t.Fatalf("own definition: %+v", a)
	}
	a = decodeAck(t, send(s.subj("register", "subj_a"), M{"worker": "w-subj", "tools": []M{def("subj_b")},
		"groups": []M{{"name": "subj_g", "description": "G."}}}))
	if len(a.Accepted) != 0 || len(a.Rejected) != 2 || a.Rejected[0].Name != "subj_b" || a.Rejected[1].Name != "subj_g" {
		t.Fatalf("another tool's definition and a group on subj_a's subject: %+v", a)
	}
	for _, r := range a.Rejected {
		if !strings.Contains(r.Reason, "subj_a") {
			t.Errorf("reason %q does not name the subject's tool", r.Reason)
		}
	}
	if got := names(t, s.list(t, "s1", nil).Tools); !slices.Equal(got, []string{"subj_a"}) {
		t.Fatalf("tools %v, want [subj_a] only", got)
	}
	a = decodeAck(t, send(s.subj("register", "group", "subj_g"), M{"worker": "w-subj", "groups": []M{{"name": "subj_g", "description": "G.", "scope": "external"}}}))
	if !slices.Equal(a.Accepted, []string{"subj_g"}) || len(a.Rejected) != 0 {
		t.Fatalf("group on its subject: %+v", a)
	}
	a = decodeAck(t, send(s.subj("register", "subj_a"), M{"worker": "w-subj", "leaving": true}))
	if len(a.Accepted) != 0 || len(a.Rejected) != 0 {
		t.Fatalf("leave: %+v", a)
	}
	wantError(t, send(s.subj("register", "a", "b"), M{"worker": "w-subj", "tools": []M{def("a")}}), "bad_event", "")
}
