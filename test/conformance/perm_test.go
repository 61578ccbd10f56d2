package conformance

import (
	"encoding/json"
	"testing"
)

// permFixture serves tools that cover each branch of the permission
// decision (docs/protocol.md 6.4; docs/permission.md):
//   - look: read-only, passthrough
//   - write: passthrough, not read-only
//   - allowed: permission allow
//   - asked: permission ask
//   - file: a path tool (rule_matcher path, rule_field path), passthrough
//   - sh: a command tool (rule_matcher command, rule_field cmd), passthrough
//   - notify: an external tool, passthrough
//   - asker: permission ask, used by addRules to carry rules in
//
// and a meta group g (so that reset_tools exists).
func permFixture(t *testing.T) *sys {
	s := start(t)
	str := M{"type": "string"}
	s.startWorker(t, []M{
		def("look", M{"permission": "passthrough", "read_only": true}),
		def("write", M{"permission": "passthrough"}),
		def("allowed", M{"permission": "allow"}),
		def("asked", M{"permission": "ask"}),
		def("file", M{"permission": "passthrough", "rule_matcher": "path", "rule_field": "path",
			"input_schema": M{"type": "object", "properties": M{"path": str}, "required": []string{"path"}}}),
		def("sh", M{"permission": "passthrough", "rule_matcher": "command", "rule_field": "cmd",
			"input_schema": M{"type": "object", "properties": M{"cmd": str}, "required": []string{"cmd"}}}),
		def("notify", M{"permission": "passthrough", "external": true}),
		def("asker", M{"permission": "ask"}),
		def("gt", M{"groups": []string{"g"}}),
	}, []M{{"name": "g", "description": "G.", "scope": "meta"}}, echo)
	s.waitListed(t, "probe", "look", "write", "allowed", "asked", "file", "sh", "notify", "asker", "reset_tools")
	return s
}

// TestPermissionModes: every mode against read-only, write, allow, ask,
// path (plain and dangerous) and external tools; request-scoped external
// tools and reset_tools are never asked about, in any mode.
func TestPermissionModes(t *testing.T) {
	s := permFixture(t)
	calls := []Call{
		{Name: "look"},
		{Name: "write"},
		{Name: "allowed"},
		{Name: "asked"},
		{Name: "file", Input: M{"path": "/srv/app/main.go"}},
		{Name: "file", Input: M{"path": "/srv/app/.env"}},
		{Name: "file", Input: M{"path": "/srv/app/.git/config"}},
		{Name: "file", Input: M{"path": "/home/u/.ssh/id_rsa"}},
		{Name: "notify"},
	}
	// Expected decision per mode, in the order of calls.
	want := map[string][]string{
		"default":      {"allow", "ask", "allow", "ask", "ask", "ask", "ask", "ask", "ask"},
		"accept_edits": {"allow", "ask", "allow", "ask", "ask", "ask", "ask", "ask", "ask"},
		"explore":      {"allow", "deny", "deny", "deny", "deny", "deny", "deny", "deny", "deny"},
		"bypass":       {"allow", "allow", "allow", "allow", "allow", "ask", "ask", "ask", "external"},
		"dont_ask":     {"allow", "deny", "allow", "deny", "deny", "deny", "deny", "deny", "deny"},
	}
	for _, mode := range []string{"default", "accept_edits", "explore", "bypass", "dont_ask"} {
		t.Run(mode, func(t *testing.T) {
			session := "m-" + mode
			s.setMode(t, session, mode)
			for i, c := range calls {
				c.ID = "c1"
				got := s.decision(t, session, nextID("r"), c)
				if got != want[mode][i] {
					t.Errorf("mode %s: %s %s: %s, want %s", mode, c.Name, jsonOf(c.Input), got, want[mode][i])
				}
			}
			// Never asked about: reset_tools and request-scoped external tools.
			r := s.call(t, session, nextID("r"), M{"calls": []Call{{ID: "c1", Name: "reset_tools", Input: M{"g": true}},
				{ID: "c2", Name: "pick"}}, "request": M{"external_tools": []M{extTool("pick", "Pick.", M{})}}})
			wantIDs(t, "reply", r.Results, "c1")
			wantSuccess(t, r.Results[0], "The currently activated tool group(s): g.")
			if len(r.Parked) != 1 || r.Parked[0].ID != "c2" || r.Parked[0].Kind != "external" {
				t.Errorf("mode %s: request-scoped external call: parked %s, want kind external", mode, jsonOf(r.Parked))
			}
		})
	}
}

// TestConfirmRequestCarriesSuggestedRules: an ask parks on
// P.confirm.<tool> with io.toolbus.confirm.request whose data has
// suggested_rules and reason (docs/protocol.md 6); reply.parked and
// call.parked carry the same suggestions (docs/protocol.md 3.2).
func TestConfirmRequestCarriesSuggestedRules(t *testing.T) {
	s := permFixture(t)
	for _, c := range []Call{{ID: "c1", Name: "write", Input: M{}}, {ID: "c1", Name: "sh", Input: M{"cmd": "git status"}},
		{ID: "c1", Name: "file", Input: M{"path": "/srv/app/main.go"}}} {
		t.Run(c.Name, func(t *testing.T) {
			confirms := s.subscribe(t, s.subj("confirm", c.Name))
			ev := s.watch(t, "s-"+c.Name)
			r := s.call(t, "s-"+c.Name, "r1", callsData(c))
			if len(r.Parked) != 1 || r.Parked[0].Kind != "confirm" {
				t.Fatalf("reply %s: want a confirmation", jsonOf(r))
			}
			req := confirms.next()
			checkHandoff(t, req, tConfirmReq, "s-"+c.Name, "r1", "c1", c.Name, c.Input)
			hasKeys(t, "confirm.request data", req.Data, "call", "user", "context", "suggested_rules", "reason")
			var d struct {
				SuggestedRules []M     `json:"suggested_rules"`
				Reason         *string `json:"reason"`
			}
			dataAs(t, req, &d)
			if len(d.SuggestedRules) == 0 {
				t.Errorf("confirm.request %s: no suggested rules", req.Data)
			}
			if d.Reason == nil || *d.Reason == "" {
				t.Errorf("confirm.request %s: empty reason", req.Data)
			}
			if jsonOf(r.Parked[0].SuggestedRules) != jsonOf(d.SuggestedRules) {
				t.Errorf("reply.parked suggested_rules %s, confirm.request %s", jsonOf(r.Parked[0].SuggestedRules), jsonOf(d.SuggestedRules))
			}
			es := ev.until(typeIs(tCallParked, "r1"))
			var pd struct {
				Calls []Parked `json:"calls"`
			}
			dataAs(t, es[len(es)-1], &pd)
			if len(pd.Calls) != 1 || jsonOf(pd.Calls[0].SuggestedRules) != jsonOf(d.SuggestedRules) {
				t.Errorf("call.parked %s, suggested_rules %s", es[len(es)-1].Data, jsonOf(d.SuggestedRules))
			}
			// Remembering the suggestion lets the same call run.
			s.answerOK(t, c.Name, "s-"+c.Name, "r1", "c1", M{"confirmed": true, "rules": d.SuggestedRules})
			ev.until(doneOf("r1"))
			if got := s.decision(t, "s-"+c.Name, "r2", c); got != "allow" {
				t.Errorf("after remembering %s: %s, want allow", jsonOf(d.SuggestedRules), got)
			}
		})
	}
}

// TestRulesFromConfirmation: rules given in a confirmation answer
// (shape {"tool", "pattern"?, "behavior"?}) join the session: deny rules
// deny in every mode, ask rules ask even in bypass, allow rules allow in
// default and dont_ask but not in explore, and never lift the safety ask
// of a dangerous path.
func TestRulesFromConfirmation(t *testing.T) {
	s := permFixture(t)

	t.Run("deny", func(t *testing.T) {
		for _, mode := range []string{"default", "bypass", "dont_ask"} {
			session := "deny-" + mode
			s.addRules(t, session, mode, M{"tool": "write", "behavior": "deny"}, M{"tool": "allowed", "behavior": "deny"})
			for _, tool := range []string{"write", "allowed"} {
				if got := s.decision(t, session, nextID("r"), Call{ID: "c1", Name: tool}); got != "deny" {
					t.Errorf("mode %s, deny rule: %s %s, want deny", mode, tool, got)
				}
			}
			// A deny rule for another tool does not touch look.
			if got := s.decision(t, session, nextID("r"), Call{ID: "c1", Name: "look"}); got != "allow" {
				t.Errorf("mode %s: look %s, want allow", mode, got)
			}
		}
	})

	t.Run("ask", func(t *testing.T) {
		s.addRules(t, "ask-bypass", "bypass", M{"tool": "allowed", "behavior": "ask"})
		if got := s.decision(t, "ask-bypass", nextID("r"), Call{ID: "c1", Name: "allowed"}); got != "ask" {
			t.Errorf("ask rule in bypass: %s, want ask", got)
		}
		if got := s.decision(t, "ask-bypass", nextID("r"), Call{ID: "c1", Name: "write"}); got != "allow" {
			t.Errorf("bypass, no rule: write %s, want allow", got)
		}
	})

	t.Run("allow", func(t *testing.T) {
		for mode, want := range map[string]string{"default": "allow", "accept_edits": "allow", "dont_ask": "allow", "explore": "deny", "bypass": "allow"} {
			session := "allow-" + mode
			s.addRules(t, session, mode, M{"tool": "write"})
			if got := s.decision(t, session, nextID("r"), Call{ID: "c1", Name: "write"}); got != want {
				t.Errorf("mode %s, allow rule: write %s, want %s", mode, got, want)
			}
			// Nothing else is allowed by it.
			if mode == "default" {
				if got := s.decision(t, session, nextID("r"), Call{ID: "c1", Name: "asked"}); got != "ask" {
					t.Errorf("allow rule for write: asked %s, want ask", got)
				}
			}
		}
	})

	t.Run("path", func(t *testing.T) {
		s.addRules(t, "path", "default", M{"tool": "file", "pattern": "/srv/app/**", "behavior": "allow"})
		for path, want := range map[string]string{
			"/srv/app/main.go":        "allow",
			"/srv/app/sub/x.go":       "allow",
			"/srv/other/main.go":      "ask",
			"/srv/app/.env":           "ask", // dangerous: always asks
			"/srv/app/.env.local":     "ask",
			"/srv/app/.git/config":    "ask",
			"/srv/app/.vscode/a.json": "ask",
		} {
			if got := s.decision(t, "path", nextID("r"), Call{ID: "c1", Name: "file", Input: M{"path": path}}); got != want {
				t.Errorf("allow rule /srv/app/**: file %s %s, want %s", path, got, want)
			}
		}
		// dont_ask turns the safety ask into a deny; the allow rule still allows.
		s.setMode(t, "path", "dont_ask")
		if got := s.decision(t, "path", nextID("r"), Call{ID: "c1", Name: "file", Input: M{"path": "/srv/app/.env"}}); got != "deny" {
			t.Errorf("dont_ask: file .env %s, want deny", got)
		}
		if got := s.decision(t, "path", nextID("r"), Call{ID: "c1", Name: "file", Input: M{"path": "/srv/app/main.go"}}); got != "allow" {
			t.Errorf("dont_ask with allow rule: file main.go %s, want allow", got)
		}
	})

	t.Run("command", func(t *testing.T) {
		s.addRules(t, "cmd", "default", M{"tool": "sh", "pattern": "git:*", "behavior": "allow"})
		for cmd, want := range map[string]string{
			"git":                        "allow",
			"git status":                 "allow",
			"gitk":                       "ask",
			"git status && curl evil.sh": "ask",
			"ls":                         "ask",
		} {
			if got := s.decision(t, "cmd", nextID("r"), Call{ID: "c1", Name: "sh", Input: M{"cmd": cmd}}); got != want {
				t.Errorf("allow rule git:*: sh %q %s, want %s", cmd, got, want)
			}
		}
		// A deny rule matches any piece of the command.
		s.addRules(t, "cmd", "bypass", M{"tool": "sh", "pattern": "rm", "behavior": "deny"})
		if got := s.decision(t, "cmd", nextID("r"), Call{ID: "c1", Name: "sh", Input: M{"cmd": "git status; rm -rf x"}}); got != "deny" {
			t.Errorf("deny rule rm in bypass: %s, want deny", got)
		}
	})

	t.Run("session.get shows rules", func(t *testing.T) {
		raw := sessionGet(t, s, "cmd")
		var g struct {
			State struct {
				Rules []M `json:"rules"`
			} `json:"state"`
		}
		if err := json.Unmarshal(raw, &g); err != nil || len(g.State.Rules) < 2 {
			t.Errorf("session.get %s: want the added rules in state.rules", raw)
		}
	})
}

// TestExternalToolPermission: an external tool goes through the permission
// decision: denied in explore and dont_ask (it never reaches
// P.external.<tool>), asked in default, parked as external once allowed.
func TestExternalToolPermission(t *testing.T) {
	s := permFixture(t)
	for _, mode := range []string{"explore", "dont_ask"} {
		s.setMode(t, "x2-"+mode, mode)
		if got := s.decision(t, "x2-"+mode, "r1", Call{ID: "c1", Name: "notify"}); got != "deny" {
			t.Errorf("mode %s: notify %s, want deny", mode, got)
		}
		if n := len(s.handoff(t, s.subj("external", "notify"))); n != 0 {
			t.Errorf("mode %s: %d external requests for a denied call", mode, n)
		}
	}
	s.addRules(t, "x3", "default", M{"tool": "notify"})
	if got := s.decision(t, "x3", "r1", Call{ID: "c1", Name: "notify"}); got != "external" {
		t.Errorf("allow rule for notify: %s, want parked as external", got)
	}
}
