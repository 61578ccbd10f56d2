package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

// approve sends io.toolbus.answer on P.approve.<tool> (docs/protocol.md 6.3).
func (s *sys) approve(t testing.TB, tool, session, replyID, callID string, data any) *Event {
	t.Helper()
	o := out{typ: tAnswer, data: data, attrs: map[string]string{"source": "conformance/approver",
		"sessionid": session, "replyid": replyID, "toolcallid": callID}}
	return s.request(t, o.msg(t, s.subj("approve", tool)))
}

// TestApproveSubject: a confirmation request carries input_digest,
// "sha256:" and the hex SHA-256 of the compact input as parked, and
// parked.list shows the same. On P.approve.<tool> the router refuses,
// with bad_request and nothing changed, another digest ("input changed"),
// an edited input, a rule that is not suggested, and an external call's
// answer; the exact confirmation with a suggested rule is accepted and
// the call runs (docs/protocol.md 6.2, 6.3, 9).
func TestApproveSubject(t *testing.T) {
	s, w := confirmFixture(t)
	confirms := s.subscribe(t, "toolbus.confirm.deploy")
	r := s.call(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "deploy", Input: M{"env": "prod"}}}})
	if len(r.Parked) != 1 || r.Parked[0].Kind != "confirm" {
		t.Fatalf("reply %s", jsonOf(r))
	}
	sum := sha256.Sum256([]byte(`{"env":"prod"}`))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	req := confirms.next()
	var d struct {
		InputDigest    string            `json:"input_digest"`
		SuggestedRules []json.RawMessage `json:"suggested_rules"`
	}
	if err := json.Unmarshal(req.Data, &d); err != nil || d.InputDigest != digest {
		t.Fatalf("confirm.request input_digest %q, want %q (%v)", d.InputDigest, digest, err)
	}
	list := s.admin(t, "parked.list", "s1", M{})
	var pl struct {
		Parked []struct {
			InputDigest string `json:"input_digest"`
		} `json:"parked"`
	}
	if err := json.Unmarshal(list.Data, &pl); err != nil || len(pl.Parked) != 1 || pl.Parked[0].InputDigest != digest {
		t.Fatalf("parked.list %s, want input_digest %s", list.Data, digest)
	}
	wrong := sha256.Sum256([]byte(`{"env":"staging"}`))
	if we := wantError(t, s.approve(t, "deploy", "s1", "r1", "c1", M{"confirmed": true, "input_digest": "sha256:" + hex.EncodeToString(wrong[:])}), "bad_request", ""); !strings.HasPrefix(we.Message, "input changed") {
		t.Errorf("another digest: %q, want it to start with \"input changed\"", we.Message)
	}
	wantError(t, s.approve(t, "deploy", "s1", "r1", "c1", M{"confirmed": true, "input_digest": digest, "input": M{"env": "staging"}}), "bad_request", "")
	wantError(t, s.approve(t, "deploy", "s1", "r1", "c1", M{"confirmed": true, "input_digest": digest, "rules": []M{{"tool": "ping"}}}), "bad_request", "")
	// A wrong digest is refused on P.answer.<tool> too.
	if we := wantError(t, s.answer(t, "deploy", "s1", "r1", "c1", M{"confirmed": true, "input_digest": "sha256:00"}), "bad_request", ""); !strings.HasPrefix(we.Message, "input changed") {
		t.Errorf("a wrong digest on P.answer: %q", we.Message)
	}
	if w.execs.Load() != 0 {
		t.Fatal("a refused confirmation ran the call")
	}
	s.wantApproved(t, s.approve(t, "deploy", "s1", "r1", "c1", M{"confirmed": true, "input_digest": digest, "rules": d.SuggestedRules}))
}

func (s *sys) wantApproved(t testing.TB, e *Event) {
	t.Helper()
	if e.Type != tAnswerAck {
		t.Fatalf("confirmation: reply %s %s", e.Type, e.Data)
	}
}
