package conformance

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestAdminUnknownVerbAndBadData: an unknown verb or bad data is
// bad_request (docs/protocol.md 9).
func TestAdminUnknownVerbAndBadData(t *testing.T) {
	s := start(t)
	cases := []struct {
		name, verb, session string
		data                any
	}{
		{"unknown verb", "tools.purge", "", M{}},
		{"unknown verb with session", "session.reset", "s1", M{}},
		{"groups.put without a name", "groups.put", "", M{"description": "x", "scope": "meta"}},
		{"groups.put bad name", "groups.put", "", M{"name": "a b", "description": "x", "scope": "meta"}},
		{"groups.put bad scope", "groups.put", "", M{"name": "g", "description": "x", "scope": "global"}},
		{"groups.put basic", "groups.put", "", M{"name": "basic", "description": "x", "scope": "meta"}},
		{"groups.delete without a name", "groups.delete", "", M{}},
		{"tools.delete without a name", "tools.delete", "", M{}},
		{"session.mode unknown mode", "session.mode", "s1", M{"mode": "yolo"}},
		{"session.activate unknown group", "session.activate", "s1", M{"groups": []string{"nope"}, "active": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, s.admin(t, tc.verb, tc.session, tc.data), "bad_request", "")
		})
	}
	// Wrong event type on an admin subject: bad_event.
	o := out{typ: tCallBatch, data: M{}}
	wantError(t, s.request(t, o.msg(t, "toolbus.admin.session.get")), "bad_event", "")
}

// TestAdminGroups: groups.put defines a group, groups.delete removes it.
func TestAdminGroups(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("gt", M{"groups": []string{"late"}})}, nil, echo)
	s.adminOK(t, "groups.put", "", M{"name": "late", "description": "Late group.", "scope": "meta"})
	l := s.list(t, "s1", nil)
	if len(l.Groups) != 2 || l.Groups[1] != (GroupInfo{Name: "late", Description: "Late group.", Scope: "meta"}) {
		t.Fatalf("groups %+v", l.Groups)
	}
	if !slices.Contains(names(t, l.Tools), "reset_tools") {
		t.Fatal("no reset_tools with a meta group")
	}
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "reset_tools", Input: M{"late": true}}, Call{ID: "c2", Name: "gt"}))
	wantSuccess(t, r.Results[1], "gt ran")
	s.adminOK(t, "groups.delete", "", M{"name": "late"})
	l = s.list(t, "s1", nil)
	if len(l.Groups) != 1 || slices.Contains(names(t, l.Tools), "reset_tools") {
		t.Fatalf("after groups.delete: groups %+v tools %v", l.Groups, names(t, l.Tools))
	}
}

// sessionGet returns session.get's reply data.
func sessionGet(t testing.TB, s *sys, session string) json.RawMessage {
	t.Helper()
	return s.adminOK(t, "session.get", session, M{})
}

// TestAdminSessionVerbs: session.get, session.activate, session.mode and
// session.delete, each with the sessionid attribute.
func TestAdminSessionVerbs(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("write", M{"permission": "passthrough"}), def("look", M{"read_only": true}),
		def("xt", M{"groups": []string{"x"}})}, []M{{"name": "x", "description": "X.", "scope": "external"},
		{"name": "m", "description": "M.", "scope": "meta"}}, echo)
	s.waitListed(t, "probe", "write", "look")

	// session.activate: external-scope groups only.
	s.adminOK(t, "session.activate", "s1", M{"groups": []string{"x"}, "active": true})
	wantError(t, s.admin(t, "session.activate", "s1", M{"groups": []string{"m"}, "active": true}), "bad_request", "")
	if got := sessionGet(t, s, "s1"); !jsonContainsString(got, "x") {
		t.Errorf("session.get does not show the activated group x: %s", got)
	}
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "xt"}))
	wantSuccess(t, r.Results[0], "xt ran")

	// session.mode: explore denies what is not read-only; bypass runs it.
	s.adminOK(t, "session.mode", "s1", M{"mode": "explore"})
	r = s.call(t, "s1", "r2", callsData(Call{ID: "c1", Name: "write"}, Call{ID: "c2", Name: "look"}))
	wantFailure(t, r.Results[0], "denied", "denied", "")
	wantSuccess(t, r.Results[1], "look ran")
	s.adminOK(t, "session.mode", "s1", M{"mode": "bypass"})
	r = s.call(t, "s1", "r3", callsData(Call{ID: "c1", Name: "write"}))
	wantSuccess(t, r.Results[0], "write ran")
	if got := sessionGet(t, s, "s1"); !jsonContainsString(got, "bypass") {
		t.Errorf("session.get does not show the mode: %s", got)
	}
	s.adminOK(t, "session.mode", "s1", M{"mode": "dont_ask"})
	r = s.call(t, "s1", "r4", callsData(Call{ID: "c1", Name: "write"}))
	wantFailure(t, r.Results[0], "denied", "denied", "")

	// session.delete forgets the session: back to defaults.
	s.adminOK(t, "session.delete", "s1", M{})
	r = s.call(t, "s1", "r5", callsData(Call{ID: "c1", Name: "xt"}, Call{ID: "c2", Name: "write"}))
	wantFailure(t, r.Results[0], "error", "inactive_tool", "")
	if len(r.Parked) != 1 || r.Parked[0].Kind != "confirm" {
		t.Errorf("after session.delete, mode default asks: %s", jsonOf(r))
	}
}

// jsonContainsString reports whether the JSON value holds s as a string
// anywhere.
func jsonContainsString(raw json.RawMessage, s string) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			return x == s
		case []any:
			return slices.ContainsFunc(x, walk)
		case map[string]any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// TestAdminParkedList: parked.list lists one session's parked calls with
// sessionid, every session's without.
func TestAdminParkedList(t *testing.T) {
	s := externalFixture(t)
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}))
	s.call(t, "s2", "r1", callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "handoff"}))
	count := func(session string) int {
		var l struct {
			Parked []json.RawMessage `json:"parked"`
		}
		raw := s.adminOK(t, "parked.list", session, M{})
		wantKeys(t, "parked.list", raw, "parked")
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatal(err)
		}
		return len(l.Parked)
	}
	if n := count(""); n != 3 {
		t.Errorf("all sessions: %d parked, want 3", n)
	}
	if n := count("s2"); n != 2 {
		t.Errorf("s2: %d parked, want 2", n)
	}
}

// TestAdminSkillsList: skills.list answers {"skills": [...]}.
func TestAdminSkillsList(t *testing.T) {
	s := start(t)
	raw := s.adminOK(t, "skills.list", "", M{})
	wantKeys(t, "skills.list", raw, "skills")
	var l struct {
		Skills []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			Source      string `json:"source"`
		} `json:"skills"`
	}
	if err := json.Unmarshal(raw, &l); err != nil || l.Skills == nil {
		t.Fatalf("skills.list %s: want a list", raw)
	}
}

// TestAdminToolsDelete: tools.delete removes a definition.
func TestAdminToolsDelete(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("old", M{"external": true})}, nil, echo)
	s.waitListed(t, "s1", "old")
	raw := s.adminOK(t, "tools.delete", "", M{"name": "old"})
	if len(raw) == 0 {
		t.Error("tools.delete reply has no data")
	}
	if s.kvGet(t, "toolbus_tools", "old") != nil {
		t.Error("toolbus_tools still holds the deleted tool")
	}
}
