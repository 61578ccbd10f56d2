package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// handoff reads, as a handler that starts now would, every request a
// router hands out for filter (P.<kind>.<tool>, with ">" or "*" for every
// tool, or P.> for both kinds): it follows P.handoff.<kind>[.<tool>]
// through the router (docs/protocol.md 6.2) and pulls without waiting
// until the closing status.
func (s *sys) handoff(t testing.TB, filter string) []*Event {
	t.Helper()
	rest := strings.TrimPrefix(filter, s.p+".")
	kinds, tool := []string{"external", "confirm"}, ""
	if rest != ">" {
		kind, tl, _ := strings.Cut(rest, ".")
		kinds = []string{kind}
		if tl != ">" && tl != "*" {
			tool = tl
		}
	}
	var all []*Event
	for _, kind := range kinds {
		all = append(all, s.follow(t, kind, tool)...)
	}
	return all
}

// follow asks a router for a handoff consumer of kind and tool and pulls
// it dry, as a foreign client: each request comes on the pull's inbox with
// its stream sequence in Nats-Sequence, and the pull ends with a Status
// header (docs/protocol.md 6.2).
func (s *sys) follow(t testing.TB, kind, tool string) []*Event {
	t.Helper()
	subject := s.subj("handoff", kind)
	if tool != "" {
		subject += "." + tool
	}
	ready := s.request(t, out{typ: "io.toolbus.handoff.follow", data: M{}}.msg(t, subject))
	if ready.Type != "io.toolbus.handoff.ready" {
		t.Fatalf("handoff.follow on %s: %s %s", subject, ready.Type, ready.Data)
	}
	var r struct {
		Consumer string `json:"consumer"`
	}
	dataAs(t, ready, &r)
	defer s.send(t, out{typ: "io.toolbus.consumer.stop", data: M{"consumer": r.Consumer}}.msg(t, subject))
	inbox := nats.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	pull := out{typ: "io.toolbus.consumer.next", data: M{"consumer": r.Consumer, "batch": 256, "expires_ms": 0}}.msg(t, subject)
	pull.Reply = inbox
	s.send(t, pull)
	var got []*Event
	for {
		m, err := sub.NextMsg(bound)
		if err != nil {
			t.Fatalf("handoff pull on %s: %v", subject, err)
		}
		if st := m.Header.Get("Status"); st != "" {
			if st != "404" {
				t.Fatalf("handoff pull on %s ended with status %s", subject, st)
			}
			return got
		}
		e := decodeEvent(t, m)
		if e.Type == "io.toolbus.error" {
			t.Fatalf("handoff pull on %s refused: %s", subject, e.Data)
		}
		if m.Header.Get("Nats-Sequence") == "" {
			t.Errorf("%s without Nats-Sequence", e.Type)
		}
		got = append(got, e)
	}
}

// kvGet reads a key of a bucket as a foreign client; nil when absent.
func (s *sys) kvGet(t testing.TB, bucket, key string) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	kv, err := s.js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil
	}
	return e.Value()
}

// requestData is the data of io.toolbus.external.request and confirm.request.
type requestData struct {
	Call           rawCall         `json:"call"`
	User           json.RawMessage `json:"user"`
	Context        json.RawMessage `json:"context"`
	SuggestedRules []json.RawMessage
	Reason         string `json:"reason"`
}

// checkHandoff checks a handoff request for one call (docs/protocol.md 6).
func checkHandoff(t testing.TB, e *Event, typ, session, replyID, callID, tool string, input any) requestData {
	t.Helper()
	if e.Type != typ {
		t.Fatalf("handoff type %s, want %s", e.Type, typ)
	}
	fromRouter(t, e)
	if e.SessionID != session || e.ReplyID != replyID || e.ToolCallID != callID {
		t.Errorf("%s: sessionid %q replyid %q toolcallid %q, want %q %q %q", typ, e.SessionID, e.ReplyID, e.ToolCallID, session, replyID, callID)
	}
	hasKeys(t, typ+" data", e.Data, "call")
	var d requestData
	dataAs(t, e, &d)
	if d.Call.ID != callID || d.Call.Name != tool || !jsonEqual(d.Call.Input, input) {
		t.Errorf("%s: call %s", typ, member(t, e.Data, "call"))
	}
	return d
}

// externalFixture: the external tool handoff (permission allow, so that it
// parks without a confirmation first) and a backend tool ping.
func externalFixture(t *testing.T, opts ...option) *sys {
	s := start(t, opts...)
	s.startWorker(t, []M{def("handoff", M{"external": true, "input_schema": M{"type": "object",
		"properties": M{"q": M{"type": "string"}}}}), def("ping"), def("serial", M{"concurrency_safe": false})}, nil, echo)
	s.waitListed(t, "probe", "handoff", "ping", "serial")
	return s
}

// TestExternalToolParks: a call of an external tool is recorded in
// P_parked, published on P.external.<tool> (and handed out from the record
// to handlers that start late), reported as parked, and answered by the first valid
// answer (docs/protocol.md 6).
func TestExternalToolParks(t *testing.T) {
	s := externalFixture(t)
	live := s.subscribe(t, "toolbus.external.handoff")
	ev := s.watch(t, "s1")
	user, ctx := M{"id": "alice"}, M{"tenant": "acme"}
	r := s.call(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "handoff", Input: M{"q": "which file?"}}, {ID: "c2", Name: "ping"}},
		"user": user, "context": ctx})
	wantIDs(t, "reply", r.Results, "c2")
	if len(r.Parked) != 1 {
		t.Fatalf("parked %s", jsonOf(r.Parked))
	}
	p := r.Parked[0]
	if p.ID != "c1" || p.Name != "handoff" || p.Kind != "external" || p.Subject != "toolbus.answer.handoff" {
		t.Fatalf("parked %s", jsonOf(p))
	}
	if s.kvGet(t, "toolbus_parked", "s1.r1.c1") == nil {
		t.Error("no P_parked record under <session>.<replyid>.<callid>")
	}
	// The live handler and one that starts now both get the request.
	d := checkHandoff(t, live.next(), tExternalReq, "s1", "r1", "c1", "handoff", M{"q": "which file?"})
	if !jsonEqual(d.User, user) || !jsonEqual(d.Context, ctx) {
		t.Errorf("external.request user %s context %s", d.User, d.Context)
	}
	late := s.handoff(t, "toolbus.external.>")
	if len(late) != 1 {
		t.Fatalf("a late handler finds %d requests, want 1", len(late))
	}
	checkHandoff(t, late[0], tExternalReq, "s1", "r1", "c1", "handoff", M{"q": "which file?"})

	// call.parked, once, with the parked call.
	es := ev.until(typeIs(tCallParked, "r1"))
	var pd struct {
		Calls []json.RawMessage `json:"calls"`
	}
	dataAs(t, es[len(es)-1], &pd)
	if len(pd.Calls) != 1 {
		t.Fatalf("call.parked %s", es[len(es)-1].Data)
	}
	hasKeys(t, "call.parked entry", pd.Calls[0], "id", "name", "input", "kind", "subject")

	s.answerOK(t, "handoff", "s1", "r1", "c1", M{"state": "success", "output": []Block{{Type: "text", Text: "a.txt"},
		{Type: "data", MediaType: "image/png", Data: "iVBORw0KGgo="}}})
	es = append(es, ev.until(doneOf("r1"))...)
	done := checkBatchEvents(t, es, "s1", "r1", "c1", "c2")
	n := 0
	for _, e := range es {
		if e.Type == tCallParked {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d call.parked events, want 1", n)
	}
	if done[0].State != "success" || textOf(done[0]) != "a.txt" || len(done[0].Output) != 2 {
		t.Errorf("external result %s", jsonOf(done[0]))
	}

	// Later answers: already_answered; unknown calls, other tools: not_parked.
	wantError(t, s.answer(t, "handoff", "s1", "r1", "c1", textAnswer("success", "again")), "already_answered", "")
	wantError(t, s.answer(t, "handoff", "s1", "r1", "c9", textAnswer("success", "x")), "not_parked", "")
	wantError(t, s.answer(t, "handoff", "s1", "r9", "c1", textAnswer("success", "x")), "not_parked", "")
	wantError(t, s.answer(t, "ping", "s1", "r1", "c2", textAnswer("success", "x")), "not_parked", "")
}

// TestAnswerForAnotherTool: an answer on P.answer.<other tool> for a parked
// call is not_parked and changes nothing.
func TestAnswerForAnotherTool(t *testing.T) {
	s := externalFixture(t)
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}))
	wantError(t, s.answer(t, "ping", "s1", "r1", "c1", textAnswer("success", "x")), "not_parked", "")
	s.answerOK(t, "handoff", "s1", "r1", "c1", textAnswer("success", "right"))
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
	wantSuccess(t, done[0], "right")
}

// TestBadAnswerNeverPoisons: a malformed answer is refused and changes
// nothing; a valid answer afterwards wins.
func TestBadAnswerNeverPoisons(t *testing.T) {
	s := externalFixture(t)
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}))
	for name, data := range map[string]any{
		"unknown state":   textAnswer("maybe", "x"),
		"confirmation":    M{"confirmed": true},
		"bad block":       M{"state": "success", "output": []M{{"type": "data", "media_type": "image/png"}}},
		"block both":      M{"state": "success", "output": []M{{"type": "data", "media_type": "image/png", "data": "AA==", "url": "https://x"}}},
		"not an object":   []int{1},
		"unknown block":   M{"state": "success", "output": []M{{"type": "video"}}},
		"state is number": M{"state": 1},
	} {
		t.Run(name, func(t *testing.T) {
			e := s.answer(t, "handoff", "s1", "r1", "c1", data)
			if e.Type != tError {
				t.Fatalf("a bad answer got %s %s", e.Type, e.Data)
			}
		})
	}
	// Attributes missing or malformed: bad_event.
	for _, drop := range []string{"sessionid", "replyid", "toolcallid"} {
		o := out{typ: tAnswer, data: textAnswer("success", "x"), attrs: map[string]string{"sessionid": "s1", "replyid": "r1", "toolcallid": "c1"}}
		delete(o.attrs, drop)
		wantError(t, s.request(t, o.msg(t, "toolbus.answer.handoff")), "bad_event", "")
	}
	s.answerOK(t, "handoff", "s1", "r1", "c1", textAnswer("error", "the user closed the dialog"))
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
	wantFailure(t, done[0], "error", "tool_error", "the user closed the dialog")
}

// TestPartialAnswers: each answer emits its call.result; batch.done follows
// the last one.
func TestPartialAnswers(t *testing.T) {
	s := externalFixture(t)
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "handoff"}))
	if len(r.Parked) != 2 {
		t.Fatalf("parked %s", jsonOf(r.Parked))
	}
	s.answerOK(t, "handoff", "s1", "r1", "c2", textAnswer("success", "second"))
	es := ev.until(typeIs(tCallResult, "r1"))
	if es[len(es)-1].ToolCallID != "c2" {
		t.Fatalf("result for %s", es[len(es)-1].ToolCallID)
	}
	// No batch.done yet: one more round trip through the router proves it.
	s.list(t, "s1", nil)
	for _, e := range ev.pending() {
		if e.Type == tBatchDone {
			t.Fatal("batch.done before the last answer")
		}
		es = append(es, e)
	}
	s.answerOK(t, "handoff", "s1", "r1", "c1", textAnswer("success", "first"))
	done := checkBatchEvents(t, append(es, ev.until(doneOf("r1"))...), "s1", "r1", "c1", "c2")
	wantSuccess(t, done[0], "first")
	wantSuccess(t, done[1], "second")
}

// TestCancelParkedCalls: parked calls of a cancelled reply end interrupted
// with the fixed text; a later answer is not_parked (docs/protocol.md 3.5, 6).
func TestCancelParkedCalls(t *testing.T) {
	s := externalFixture(t)
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "ping"}, Call{ID: "c3", Name: "serial"}))
	if len(r.Parked) != 2 || r.Parked[1].Kind != "queued" {
		t.Fatalf("reply %s", jsonOf(r))
	}
	s.cancel(t, "s1", "r1", nil)
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1", "c2", "c3")
	wantFailure(t, done[0], "interrupted", "interrupted", interruptedText)
	wantSuccess(t, done[1], "ping ran")
	// docs/protocol.md 3.5, Decision: queued calls end interrupted too.
	wantFailure(t, done[2], "interrupted", "interrupted", interruptedText)
	wantError(t, s.answer(t, "handoff", "s1", "r1", "c1", textAnswer("success", "late")), "not_parked", "")
}

// TestParkedCallExpires: a call nobody answers in time ends with timeout;
// an answer afterwards is not_parked (docs/protocol.md 6, park TTL).
func TestParkedCallExpires(t *testing.T) {
	s := externalFixture(t, withParkTTL(300*time.Millisecond))
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}))
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
	wantFailure(t, done[0], "error", "timeout", "Tool execution timeout after 300ms")
	wantError(t, s.answer(t, "handoff", "s1", "r1", "c1", textAnswer("success", "late")), "not_parked", "")
	if rs := s.handoff(t, "toolbus.>"); len(rs) != 0 {
		t.Errorf("the handoff stream still holds %d expired requests", len(rs))
	}
}

// TestPermissionDefaultsToPassthrough: a definition without "permission"
// is passthrough: in mode default a tool that is not read-only asks first.
func TestPermissionDefaultsToPassthrough(t *testing.T) {
	s := start(t)
	d := def("plain")
	delete(d, "permission")
	w := s.serve(t, echo, d)
	l := s.list(t, "s1", M{"format": "toolbus"})
	if got := string(member(t, l.Tools[0], "permission")); got != `"passthrough"` {
		t.Errorf("listed permission %s, want \"passthrough\"", got)
	}
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "plain"}))
	if len(r.Parked) != 1 || r.Parked[0].Kind != "confirm" || w.execs.Load() != 0 {
		t.Fatalf("reply %s: want a confirmation", jsonOf(r))
	}
}

// confirmFixture: deploy asks for confirmation (permission "ask"), with a
// required env; ping runs freely.
func confirmFixture(t *testing.T, opts ...option) (*sys, *worker) {
	s := start(t, opts...)
	w := s.startWorker(t, []M{def("deploy", M{"permission": "ask", "concurrency_safe": false, "input_schema": M{"type": "object",
		"properties": M{"env": M{"type": "string", "enum": []string{"prod", "staging"}}}, "required": []string{"env"}}}),
		def("ping")}, nil, func(c *execCall) { c.text(c.Call.Name + " ran with " + string(c.Call.Input)) })
	s.waitListed(t, "probe", "deploy", "ping")
	return s, w
}

// TestConfirmWithEditedInput: a permission "ask" parks the call on
// P.confirm.<tool> with io.toolbus.confirm.request (suggested_rules,
// reason); confirmed with an edited input, the edited call runs; a call
// behind it is "queued" and runs afterwards (docs/protocol.md 5.2, 6).
func TestConfirmWithEditedInput(t *testing.T) {
	s, w := confirmFixture(t)
	ev := s.watch(t, "s1")
	confirms := s.subscribe(t, "toolbus.confirm.deploy")
	r := s.call(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "deploy", Input: M{"env": "prod"}}, {ID: "c2", Name: "ping"}},
		"user": "alice"})
	if len(r.Results) != 0 || len(r.Parked) != 2 {
		t.Fatalf("reply %s", jsonOf(r))
	}
	if p := r.Parked[0]; p.ID != "c1" || p.Kind != "confirm" || p.Subject != "toolbus.answer.deploy" {
		t.Errorf("parked %s", jsonOf(p))
	}
	if p := r.Parked[1]; p.ID != "c2" || p.Kind != "queued" || p.Subject != "toolbus.answer.ping" {
		t.Errorf("parked %s", jsonOf(p))
	}
	req := confirms.next()
	d := checkHandoff(t, req, tConfirmReq, "s1", "r1", "c1", "deploy", M{"env": "prod"})
	hasKeys(t, "confirm.request data", req.Data, "call", "user", "suggested_rules", "reason")
	if string(d.User) != `"alice"` {
		t.Errorf("user %s", d.User)
	}
	if w.execs.Load() != 0 {
		t.Fatal("a call ran before its confirmation")
	}
	// A queued call is not parked: it cannot be answered.
	wantError(t, s.answer(t, "ping", "s1", "r1", "c2", textAnswer("success", "x")), "not_parked", "")
	// An edited input that fails validation is refused and changes nothing.
	if e := s.answer(t, "deploy", "s1", "r1", "c1", M{"confirmed": true, "input": M{"env": "moon"}}); e.Type != tError {
		t.Fatalf("invalid edited input accepted: %s", e.Data)
	}
	s.answerOK(t, "deploy", "s1", "r1", "c1", M{"confirmed": true, "input": M{"env": "staging"}})
	// dedupeResults: see TestDiscrepancyConfirmedCallOneResultEvent.
	done := checkBatchEvents(t, dedupeResults(ev.until(doneOf("r1"))), "s1", "r1", "c1", "c2")
	wantSuccess(t, done[0], `deploy ran with {"env":"staging"}`)
	wantSuccess(t, done[1], "ping ran with {}")
	wantError(t, s.answer(t, "deploy", "s1", "r1", "c1", M{"confirmed": false}), "already_answered", "")
}

// TestConfirmDenied: refused → result state denied, code denied, fixed text.
func TestConfirmDenied(t *testing.T) {
	s, w := confirmFixture(t)
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "deploy", Input: M{"env": "prod"}}))
	s.answerOK(t, "deploy", "s1", "r1", "c1", M{"confirmed": false})
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
	wantFailure(t, done[0], "denied", "denied", `<system-reminder>The execution of tool "deploy" is denied by user!</system-reminder>`)
	if w.execs.Load() != 0 {
		t.Fatal("a refused call ran")
	}
}

// TestConfirmRulesJoinSession: rules in a confirmation join the session's
// permission context: the next call they cover runs without asking.
func TestConfirmRulesJoinSession(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("write", M{"permission": "passthrough"}))
	confirms := s.subscribe(t, "toolbus.confirm.write")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "write"}))
	if len(r.Parked) != 1 || r.Parked[0].Kind != "confirm" {
		t.Fatalf("a passthrough tool in mode default: %s, want a confirmation", jsonOf(r))
	}
	var d struct {
		SuggestedRules []json.RawMessage `json:"suggested_rules"`
	}
	dataAs(t, confirms.next(), &d)
	if len(d.SuggestedRules) == 0 {
		t.Fatal("no suggested rules to remember")
	}
	ev := s.watch(t, "s1")
	s.answerOK(t, "write", "s1", "r1", "c1", M{"confirmed": true, "rules": d.SuggestedRules})
	ev.until(doneOf("r1"))
	r = s.call(t, "s1", "r2", callsData(Call{ID: "c1", Name: "write"}))
	if len(r.Results) != 1 {
		t.Fatalf("after remembering %s: %s", d.SuggestedRules, jsonOf(r))
	}
	wantSuccess(t, r.Results[0], "write ran")
	// Another session still asks.
	r = s.call(t, "s2", "r1", callsData(Call{ID: "c1", Name: "write"}))
	if len(r.Parked) != 1 {
		t.Fatalf("another session: %s", jsonOf(r))
	}
}

// TestExternalToolIsAskedFirst: external tools go through the permission
// decision too; confirmed, the call parks again as external.
func TestExternalToolIsAskedFirst(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("notify", M{"external": true, "permission": "ask"})}, nil, echo)
	s.waitListed(t, "probe", "notify")
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "notify"}))
	if len(r.Parked) != 1 || r.Parked[0].Kind != "confirm" {
		t.Fatalf("reply %s", jsonOf(r))
	}
	s.answerOK(t, "notify", "s1", "r1", "c1", M{"confirmed": true})
	var req *Event
	waitFor(t, func() error {
		if rs := s.handoff(t, "toolbus.external.notify"); len(rs) > 0 {
			req = rs[len(rs)-1]
			return nil
		}
		return errorf("no external request for the confirmed call")
	})
	checkHandoff(t, req, tExternalReq, "s1", "r1", "c1", "notify", M{})
	s.answerOK(t, "notify", "s1", "r1", "c1", textAnswer("success", "sent"))
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
	wantSuccess(t, done[0], "sent")
}

// TestNeverAskedAbout: reset_tools, request-scoped external tools and
// read-only tools do not ask, even when every other tool would.
func TestNeverAskedAbout(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("look", M{"permission": "passthrough", "read_only": true}),
		def("g1tool", M{"groups": []string{"g1"}})}, []M{{"name": "g1", "description": "G1.", "scope": "meta"}}, echo)
	s.waitListed(t, "probe", "look", "reset_tools")
	r := s.call(t, "s1", "r1", M{"calls": []Call{{ID: "c1", Name: "look"}, {ID: "c2", Name: "reset_tools", Input: M{"g1": true}},
		{ID: "c3", Name: "ask_user"}},
		"request": M{"external_tools": []M{extTool("ask_user", "Ask.", M{})}}})
	wantIDs(t, "reply", r.Results, "c1", "c2")
	if len(r.Parked) != 1 || r.Parked[0].ID != "c3" || r.Parked[0].Kind != "external" {
		t.Fatalf("parked %s", jsonOf(r.Parked))
	}
}

// TestDefaultModeFromRouter: a new session's mode is the router's
// configured default; in bypass a passthrough tool runs without asking.
func TestDefaultModeFromRouter(t *testing.T) {
	s := start(t, withDefaultMode("bypass"))
	s.serve(t, echo, def("write", M{"permission": "passthrough"}))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "write"}))
	wantSuccess(t, r.Results[0], "write ran")
}

// TestApprovalUIFromDocs: an approval UI written from the docs alone finds
// every parked call through parked.list (no session needed), answers them,
// and sees each batch complete on its events subject.
func TestApprovalUIFromDocs(t *testing.T) {
	s, _ := confirmFixture(t)
	s.startWorker(t, []M{def("handoff", M{"external": true})}, nil, echo)
	s.waitListed(t, "probe", "handoff")
	ev1, ev2 := s.watch(t, "alice"), s.watch(t, "bob")
	s.call(t, "alice", "t1", callsData(Call{ID: "c1", Name: "deploy", Input: M{"env": "prod"}}))
	s.call(t, "bob", "t7", callsData(Call{ID: "x1", Name: "handoff", Input: M{"q": 1}}, Call{ID: "x2", Name: "ping"}))

	var list struct {
		Parked []struct {
			Session string          `json:"session"`
			ReplyID string          `json:"reply_id"`
			ID      string          `json:"id"`
			Name    string          `json:"name"`
			Input   json.RawMessage `json:"input"`
			Kind    string          `json:"kind"`
			Subject string          `json:"subject"`
		} `json:"parked"`
	}
	raw := s.adminOK(t, "parked.list", "", M{})
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Parked) != 2 {
		t.Fatalf("parked.list %s, want 2 calls", raw)
	}
	for _, p := range list.Parked {
		var data M
		switch p.Kind {
		case "confirm":
			data = M{"confirmed": true}
		case "external":
			data = textAnswer("success", "done by hand")
		default:
			t.Fatalf("kind %s", p.Kind)
		}
		tool := strings.TrimPrefix(p.Subject, "toolbus.answer.")
		if tool != p.Name {
			t.Errorf("subject %s for tool %s", p.Subject, p.Name)
		}
		s.answerOK(t, tool, p.Session, p.ReplyID, p.ID, data)
	}
	// dedupeResults: see TestDiscrepancyConfirmedCallOneResultEvent.
	checkBatchEvents(t, dedupeResults(ev1.until(doneOf("t1"))), "alice", "t1", "c1")
	done := checkBatchEvents(t, ev2.until(doneOf("t7")), "bob", "t7", "x1", "x2")
	wantSuccess(t, done[0], "done by hand")
	raw = s.adminOK(t, "parked.list", "", M{})
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Parked) != 0 {
		t.Fatalf("parked.list after the answers: %s", raw)
	}
	// A late handler finds no open request any more (docs/protocol.md 6).
	if rs := s.handoff(t, "toolbus.>"); len(rs) != 0 {
		t.Errorf("handoff stream still holds %d answered requests", len(rs))
	}
}

// TestFirstAnswerWins: of answers sent at once, exactly one is accepted;
// the others get already_answered (compare-and-set, docs/protocol.md 6).
func TestFirstAnswerWins(t *testing.T) {
	s := externalFixture(t)
	s.addRouter()
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "handoff"}))
	var ps []*pendingReply
	for i := range 8 {
		o := out{typ: tAnswer, data: textAnswer("success", fmt.Sprintf("answer %d", i)),
			attrs: map[string]string{"sessionid": "s1", "replyid": "r1", "toolcallid": "c1"}}
		ps = append(ps, s.requestAsync(t, o.msg(t, "toolbus.answer.handoff")))
	}
	accepted := 0
	for _, p := range ps {
		switch e := p.wait(t); e.Type {
		case tAnswerAck:
			accepted++
		default:
			wantError(t, e, "already_answered", "")
		}
	}
	if accepted != 1 {
		t.Fatalf("%d answers accepted, want 1", accepted)
	}
	checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
}
