package conformance

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestAdminReplyShapes: every verb answers io.toolbus.admin.reply with the
// data shape of docs/protocol.md 9.
func TestAdminReplyShapes(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("handoff", M{"external": true}), def("xt", M{"groups": []string{"x"}})},
		[]M{{"name": "x", "description": "X.", "scope": "external"}}, echo)
	s.waitListed(t, "probe", "handoff")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff", Input: M{"q": "?"}}))

	wantKeys(t, "groups.put", s.adminOK(t, "groups.put", "", M{"name": "m", "description": "M.", "scope": "meta"}), "group")
	sessionKeys := []string{"session", "stored", "groups", "state"}
	for _, v := range []struct {
		verb string
		data M
	}{
		{"session.get", M{}},
		{"session.activate", M{"groups": []string{"x"}, "active": true}},
		{"session.mode", M{"mode": "accept_edits"}},
	} {
		raw := s.adminOK(t, v.verb, "s1", v.data)
		wantKeys(t, v.verb, raw, sessionKeys...)
		var g struct {
			Session string      `json:"session"`
			Groups  []GroupInfo `json:"groups"`
			State   struct {
				Active []string `json:"active"`
				Mode   string   `json:"mode"`
			} `json:"state"`
		}
		if err := json.Unmarshal(raw, &g); err != nil || g.Session != "s1" || len(g.Groups) == 0 || g.Groups[0].Name != "basic" {
			t.Errorf("%s %s", v.verb, raw)
		}
		hasKeys(t, v.verb+" state", member(t, raw, "state"), "active", "mode")
		if v.verb == "session.mode" && g.State.Mode != "accept_edits" {
			t.Errorf("session.mode: state.mode %q", g.State.Mode)
		}
		if v.verb != "session.get" && !slices.Contains(g.State.Active, "x") {
			t.Errorf("%s: state.active %v, want x", v.verb, g.State.Active)
		}
	}
	ps := s.parkedList(t, "s1")
	if len(ps) != 1 {
		t.Fatalf("parked.list: %d entries", len(ps))
	}
	// suggested_rules and reason are left out for an external call.
	hasKeys(t, "parked.list entry", ps[0], "session", "reply_id", "id", "name", "input", "kind", "subject", "created", "expires")
	raw := s.adminOK(t, "status", "", M{})
	hasKeys(t, "status", raw, "router", "tools", "sessions", "parked")
	wantKeys(t, "session.delete", s.adminOK(t, "session.delete", "s1", M{}), "deleted")
	wantKeys(t, "groups.delete", s.adminOK(t, "groups.delete", "", M{"name": "m"}), "deleted")
	wantKeys(t, "tools.delete", s.adminOK(t, "tools.delete", "", M{"name": "xt"}), "deleted")
	wantKeys(t, "skills.list", s.adminOK(t, "skills.list", "", M{}), "skills")
}

// TestAdminBadDataEveryVerb: data of the wrong shape is bad_request for
// each verb; so are session verbs without sessionid and unknown verbs.
func TestAdminBadDataEveryVerb(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("xt", M{"groups": []string{"x"}})}, []M{{"name": "x", "description": "X.", "scope": "external"}}, echo)
	cases := []struct {
		name, verb, session string
		data                any
	}{
		{"groups.put array", "groups.put", "", []int{1}},
		{"groups.put string", "groups.put", "", "g"},
		{"groups.put name number", "groups.put", "", M{"name": 7, "scope": "meta"}},
		{"groups.delete name number", "groups.delete", "", M{"name": 7}},
		{"groups.delete array", "groups.delete", "", []string{"x"}},
		{"tools.delete name number", "tools.delete", "", M{"name": true}},
		{"tools.delete bad name", "tools.delete", "", M{"name": "a b"}},
		{"session.activate groups not a list", "session.activate", "s1", M{"groups": "x", "active": true}},
		{"session.activate active not bool", "session.activate", "s1", M{"groups": []string{"x"}, "active": "yes"}},
		{"session.activate basic", "session.activate", "s1", M{"groups": []string{"basic"}, "active": false}},
		{"session.mode number", "session.mode", "s1", M{"mode": 1}},
		{"session.mode missing", "session.mode", "s1", M{}},
		{"session.mode array", "session.mode", "s1", []string{"bypass"}},
		{"session.get without sessionid", "session.get", "", M{}},
		{"session.activate without sessionid", "session.activate", "", M{"groups": []string{"x"}, "active": true}},
		{"session.mode without sessionid", "session.mode", "", M{"mode": "bypass"}},
		{"session.delete without sessionid", "session.delete", "", M{}},
		{"parked.list unknown member", "parked.list", "", M{"page": 2}},
		{"parked.list limit under 1", "parked.list", "", M{"limit": -1}},
		{"parked.list limit not a number", "parked.list", "", M{"limit": "1"}},
		{"parked.list after not a cursor", "parked.list", "", M{"after": "r1"}},
		{"parked.list after without a key", "parked.list", "", M{"after": "2026-12-06T10:00:00Z"}},
		{"unknown verb", "nope", "", M{}},
		{"verb prefix", "session", "s1", M{}},
		{"verb prefix parked", "parked", "", M{}},
		{"verb too long", "parked.list.all", "", M{}},
		{"unknown group verb", "groups.list", "", M{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, s.admin(t, tc.verb, tc.session, tc.data), "bad_request", "")
		})
	}
	// Nothing changed: s1 is still in mode default with no active x.
	raw := sessionGet(t, s, "s1")
	var g struct {
		State struct {
			Active []string `json:"active"`
			Mode   string   `json:"mode"`
		} `json:"state"`
	}
	if err := json.Unmarshal(raw, &g); err != nil || g.State.Mode != "default" || slices.Contains(g.State.Active, "x") {
		t.Errorf("after bad admin requests: %s", raw)
	}
}

// TestAdminParkedListFilter: with sessionid, parked.list holds exactly
// that session's calls; without, every session's; entries name their
// session, reply id and answer subject.
func TestAdminParkedListFilter(t *testing.T) {
	s := externalFixture(t)
	s.call(t, "a", "r1", callsData(Call{ID: "c1", Name: "handoff", Input: M{"q": "x"}}))
	s.call(t, "b", "r2", callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "serial"}))
	type entry struct {
		Session string          `json:"session"`
		ReplyID string          `json:"reply_id"`
		ID      string          `json:"id"`
		Name    string          `json:"name"`
		Input   json.RawMessage `json:"input"`
		Kind    string          `json:"kind"`
		Subject string          `json:"subject"`
	}
	decode := func(raws []json.RawMessage) []entry {
		var es []entry
		for _, r := range raws {
			var e entry
			if err := json.Unmarshal(r, &e); err != nil {
				t.Fatal(err)
			}
			es = append(es, e)
		}
		return es
	}
	a := decode(s.parkedList(t, "a"))
	if len(a) != 1 || a[0].Session != "a" || a[0].ReplyID != "r1" || a[0].ID != "c1" || a[0].Name != "handoff" ||
		a[0].Kind != "external" || a[0].Subject != "toolbus.answer.handoff" || !jsonEqual(a[0].Input, M{"q": "x"}) {
		t.Errorf("parked.list a: %s", jsonOf(a))
	}
	b := decode(s.parkedList(t, "b"))
	for _, e := range b {
		if e.Session != "b" {
			t.Errorf("parked.list b lists %s", jsonOf(e))
		}
	}
	if len(b) == 0 {
		t.Errorf("parked.list b is empty")
	}
	all := decode(s.parkedList(t, ""))
	if len(all) != len(a)+len(b) {
		t.Errorf("parked.list without sessionid: %d entries, want %d", len(all), len(a)+len(b))
	}
	if n := len(s.parkedList(t, "nobody")); n != 0 {
		t.Errorf("parked.list of an unknown session: %d entries", n)
	}
}
