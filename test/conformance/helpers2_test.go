package conformance

import (
	"encoding/json"
	"strings"
	"testing"
)

// decision is what a one-call batch shows of the permission decision:
// "allow" (the call ran), "deny" (result denied) or "ask" (parked confirm).
// For a denial it also checks the fixed text of docs/protocol.md 3.3.
func (s *sys) decision(t testing.TB, session, replyID string, c Call) string {
	t.Helper()
	r := s.call(t, session, replyID, callsData(c))
	switch {
	case len(r.Parked) == 1 && len(r.Results) == 0:
		switch r.Parked[0].Kind {
		case "confirm":
			return "ask"
		case "external":
			return "external"
		}
		t.Fatalf("call %s parked as %s", c.Name, r.Parked[0].Kind)
	case len(r.Results) == 1 && len(r.Parked) == 0:
		res := r.Results[0]
		switch res.State {
		case "success":
			return "allow"
		case "denied":
			wantDeniedByPermission(t, res, c.Name)
			return "deny"
		}
		t.Fatalf("call %s: result %s", c.Name, jsonOf(res))
	}
	t.Fatalf("call %s: reply %s", c.Name, jsonOf(r))
	return ""
}

// wantDeniedByPermission checks the denied text for a rule or a mode
// (docs/protocol.md 3.3, Decision): PermissionDeniedError: The tool '<t>'
// may not run: <reason>.
func wantDeniedByPermission(t testing.TB, r Result, tool string) {
	t.Helper()
	if r.State != "denied" || r.Error == nil || r.Error.Code != "denied" {
		t.Fatalf("call %s: want denied, got %s", r.ID, jsonOf(r))
	}
	prefix := "PermissionDeniedError: The tool '" + tool + "' may not run: "
	txt := textOf(r)
	if !strings.HasPrefix(txt, prefix) || !strings.HasSuffix(txt, ".") || len(txt) <= len(prefix)+1 {
		t.Errorf("call %s: denied text %q, want %q<reason>.", r.ID, txt, prefix)
	}
	if r.Error.Message != txt {
		t.Errorf("call %s: error.message %q differs from the text %q", r.ID, r.Error.Message, txt)
	}
}

// setMode sets a session's permission mode through P.admin.session.mode.
func (s *sys) setMode(t testing.TB, session, mode string) {
	t.Helper()
	s.adminOK(t, "session.mode", session, M{"mode": mode})
}

// addRules adds rules to a session's permission context the only way the
// wire offers: a confirmation answer's "rules". It parks a call of the
// tool asker (permission "ask") in mode default, confirms it with rules,
// waits for the batch, and sets the session's mode to mode.
func (s *sys) addRules(t testing.TB, session, mode string, rules ...M) {
	t.Helper()
	s.setMode(t, session, "default")
	ev := s.watch(t, session)
	id := nextID("rules")
	r := s.call(t, session, id, callsData(Call{ID: "c1", Name: "asker"}))
	if len(r.Parked) != 1 || r.Parked[0].Kind != "confirm" {
		t.Fatalf("asker did not ask: %s", jsonOf(r))
	}
	s.answerOK(t, "asker", session, id, "c1", M{"confirmed": true, "rules": rules})
	ev.until(doneOf(id))
	s.setMode(t, session, mode)
}

// parkedList returns parked.list's entries (session "" for every session).
func (s *sys) parkedList(t testing.TB, session string) []json.RawMessage {
	t.Helper()
	var l struct {
		Parked []json.RawMessage `json:"parked"`
	}
	raw := s.adminOK(t, "parked.list", session, M{})
	wantKeys(t, "parked.list", raw, "parked")
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatal(err)
	}
	return l.Parked
}
