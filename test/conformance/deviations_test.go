// Tests in this file were written as deviations from docs/protocol.md that the
// black-box suite found; each is fixed now and stays as a regression test.
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestConfirmedCallOneResultEvent: docs/protocol.md 3.4,
// "io.toolbus.call.result: one per finished call". A call that ran after a
// confirmation gets two identical call.result events.
func TestConfirmedCallOneResultEvent(t *testing.T) {
	s, _ := confirmFixture(t)
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "deploy", Input: M{"env": "prod"}}))
	s.answerOK(t, "deploy", "s1", "r1", "c1", M{"confirmed": true})
	done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
	wantSuccess(t, done[0], `deploy ran with {"env":"prod"}`)
}

// TestMalformedCancelAnswered: docs/protocol.md 1, "Anything
// malformed (...) is answered, when the message has a reply subject, with
// an io.toolbus.error event". On P.cancel.<session> routers drop malformed
// messages silently, even with a reply subject.
func TestMalformedCancelAnswered(t *testing.T) {
	s := start(t)
	cases := map[string][]byte{
		"not JSON":             []byte("cancel it"),
		"wrong type":           mutate(envelope(tCallBatch, M{}), "sessionid", "s1"),
		"sessionid differs":    mutate(envelope(tCallCancel, M{}), "sessionid", "s2"),
		"replyid missing":      mutate(envelope(tCallCancel, M{}), "replyid", nil),
		"replyid not an ident": mutate(envelope(tCallCancel, M{}), "replyid", "r.1"),
	}
	// All at once, so that the missing replies cost one bound, not five.
	pending := map[string]*pendingReply{}
	for name, body := range cases {
		pending[name] = s.requestAsync(t, rawStructured("toolbus.cancel.s1", body))
	}
	deadline := time.Now().Add(bound)
	for name, p := range pending {
		select {
		case m := <-p.ch:
			t.Run(name, func(t *testing.T) { wantError(t, decodeEvent(t, m), "bad_event", "") })
		case <-time.After(time.Until(deadline)):
			t.Errorf("%s: no reply within %v", name, bound)
		}
	}
}

// TestResentAfterAnswerGetsSameResults: docs/protocol.md 3.1,
// "Re-sending a batch with the same sessionid and id within the dedupe
// window (...) the re-sent batch gets the same results for those calls as
// the first one". Once a batch whose call was parked has finished, a
// re-sent copy gets an `internal` result ("park ...: key exists") instead,
// with a call.parked event whose calls are null and a second batch.done.
func TestResentAfterAnswerGetsSameResults(t *testing.T) {
	t.Run("external", func(t *testing.T) {
		s := externalFixture(t)
		ev := s.watch(t, "s1")
		data := callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "ping"})
		s.call(t, "s1", "r1", data)
		s.answerOK(t, "handoff", "s1", "r1", "c1", textAnswer("success", "picked"))
		done := checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1", "c2")
		r := s.call(t, "s1", "r1", data)
		if len(r.Parked) != 0 || jsonOf(r.Results) != jsonOf(done) {
			t.Fatalf("re-sent batch got %s, want the first results %s", jsonOf(r), jsonOf(done))
		}
	})
	t.Run("confirm", func(t *testing.T) {
		s, w := confirmFixture(t)
		ev := s.watch(t, "s1")
		data := callsData(Call{ID: "c1", Name: "deploy", Input: M{"env": "prod"}})
		s.call(t, "s1", "r1", data)
		s.answerOK(t, "deploy", "s1", "r1", "c1", M{"confirmed": true})
		done := ev.until(doneOf("r1"))
		var first struct {
			Results []Result `json:"results"`
		}
		dataAs(t, done[len(done)-1], &first)
		r := s.call(t, "s1", "r1", data)
		if len(r.Parked) != 0 || jsonOf(r.Results) != jsonOf(first.Results) {
			t.Fatalf("re-sent batch got %s, want the first results %s", jsonOf(r), jsonOf(first.Results))
		}
		if n := w.execs.Load(); n != 1 {
			t.Fatalf("deploy ran %d times", n)
		}
	})
}

// TestCallParkedOncePerBatch: docs/protocol.md 3.4,
// "io.toolbus.call.parked: once per batch that parks anything". A batch
// whose queued call parks in turn after the first answer publishes a
// second call.parked (docs/protocol.md 3.4 describes this, without marking
// it a Decision).
func TestCallParkedOncePerBatch(t *testing.T) {
	s, _ := confirmFixture(t)
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "deploy", Input: M{"env": "prod"}},
		Call{ID: "c2", Name: "deploy", Input: M{"env": "staging"}}))
	s.answerOK(t, "deploy", "s1", "r1", "c1", M{"confirmed": true})
	// c2 now waits for its own confirmation; answer it where parked.list says.
	var list struct {
		Parked []struct {
			ID string `json:"id"`
		} `json:"parked"`
	}
	waitFor(t, func() error {
		if err := json.Unmarshal(s.adminOK(t, "parked.list", "s1", M{}), &list); err != nil {
			return err
		}
		if len(list.Parked) != 1 || list.Parked[0].ID != "c2" {
			return errorf("parked %+v, want c2", list.Parked)
		}
		return nil
	})
	s.answerOK(t, "deploy", "s1", "r1", "c2", M{"confirmed": true})
	es := ev.until(doneOf("r1"))
	n := 0
	for _, e := range es {
		if e.Type == tCallParked {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d call.parked events for one batch, want 1:%s", n, eventsString(es))
	}
}

// TestExecDataHasUserAndContext: docs/protocol.md 5.1, data
// `{"call": {...}, "user", "context", "attempt": 1, "state": {...}}` where
// only `state` is conditional. A batch without user/context yields exec
// data without those members (and likewise the external request of 6,
// data `{"call": {...}, "user", "context"}`).
func TestExecDataHasUserAndContext(t *testing.T) {
	s := externalFixture(t)
	w := s.serve(t, echo, def("plain"))
	live := s.subscribe(t, "toolbus.external.handoff")
	s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "plain"}, Call{ID: "c2", Name: "handoff"}))
	hasKeys(t, "exec data", w.received()[0].data, "call", "user", "context", "attempt")
	hasKeys(t, "external.request data", live.next().Data, "call", "user", "context")
}

// TestSkillsObjectStore: docs/protocol.md 8 lists the object store
// P_skills (`toolbus_skills`) among the state in JetStream; no router
// creates it (skills are not implemented: docs/protocol.md 9 says
// "skills are not served yet").
func TestSkillsObjectStore(t *testing.T) {
	s := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := s.js.ObjectStore(ctx, "toolbus_skills"); err != nil {
		t.Fatalf("object store toolbus_skills: %v", err)
	}
}

// TestLongCallOfLiveWorker: docs/protocol.md 3.3, "unknown_outcome
// (the worker vanished mid-call ...)", 5.3 "Each tool has timeout_ms
// (default 300000)" and 7 (a worker is gone after three missed beats). A
// worker written from docs/protocol.md beats on time but does not send the
// "inflight" extension of docs/protocol.md 5; the router then ends every
// exec request older than three heartbeats as unknown_outcome, although the
// worker is alive: a 2.5 s call of a tool with timeout_ms 4000 never
// succeeds, and a stuck call of a tool with timeout_ms 2500 is not reported
// as its timeout (router heartbeat 500 ms here; 15 s by default).
func TestLongCallOfLiveWorker(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		if c.Call.Name == "stuck" {
			<-c.ctx.Done()
			return
		}
		select {
		case <-time.After(2500 * time.Millisecond): // the tool's own work
			c.text("slow but fine")
		case <-c.ctx.Done():
		}
	}, def("slow", M{"timeout_ms": 4000}), def("stuck", M{"timeout_ms": 2500}))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "slow"}, Call{ID: "c2", Name: "stuck"}))
	wantSuccess(t, r.Results[0], "slow but fine")
	wantFailure(t, r.Results[1], "error", "timeout", "Tool execution timeout after 2.5s")
}

// TestErrorResultsHaveText: docs/protocol.md 3.3, "An error result
// still carries a readable text block, and error carries the
// machine-readable code." Results made from a worker's or an external
// handler's output that has no text block (state error with only a data
// block or none, state interrupted with no output) carry no text at all.
func TestErrorResultsHaveText(t *testing.T) {
	s := externalFixture(t)
	s.serve(t, func(c *execCall) {
		switch c.Call.ID {
		case "w1":
			c.result("error", []Block{{Type: "data", MediaType: "image/png", Data: "iVBORw0KGgo="}})
		case "w2":
			c.result("interrupted", []Block{})
		}
	}, def("wk"))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "w1", Name: "wk"}, Call{ID: "w2", Name: "wk"}))
	for _, res := range r.Results {
		if textOf(res) == "" {
			t.Errorf("%s: %s result without a readable text block: %s", res.ID, res.State, jsonOf(res))
		}
	}
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r2", callsData(Call{ID: "e1", Name: "handoff"}, Call{ID: "e2", Name: "handoff"}))
	s.answerOK(t, "handoff", "s1", "r2", "e1", M{"state": "error", "output": []Block{}})
	s.answerOK(t, "handoff", "s1", "r2", "e2", M{"state": "error", "output": []Block{{Type: "data", MediaType: "image/png", URL: "https://example.com/x.png"}}})
	es := ev.until(doneOf("r2"))
	var done struct {
		Results []Result `json:"results"`
	}
	dataAs(t, es[len(es)-1], &done)
	for _, res := range done.Results {
		if textOf(res) == "" {
			t.Errorf("%s: error result of an external answer without a readable text block: %s", res.ID, jsonOf(res))
		}
	}
}

// TestSessionModeSharedAtOnce: docs/protocol.md 2, "Routers are
// stateless and interchangeable (...) all shared state lives in JetStream",
// and 6 (every call goes through the session's permission decision). With
// several routers, a batch sent right after session.mode was acknowledged
// is sometimes decided by another router under the previous mode (its
// session cache lags the KV write): "explore" acknowledged, yet a tool that
// is not read-only runs. The same lag applies to rules from a confirmation.
// It is a race: the test tries many times.
func TestSessionModeSharedAtOnce(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("write", M{"permission": "passthrough"}))
	s.addRouter()
	s.addRouter()
	for i := range 200 {
		mode := []string{"explore", "bypass"}[i%2]
		s.adminOK(t, "session.mode", "s1", M{"mode": mode})
		r := s.call(t, "s1", fmt.Sprintf("r%d", i), callsData(Call{ID: "c1", Name: "write"}))
		got, why := "parked", ""
		if len(r.Results) == 1 {
			got = r.Results[0].State
			if e := r.Results[0].Error; e != nil {
				why = e.Message
			}
		}
		if want := map[string]string{"explore": "denied", "bypass": "success"}[mode]; got != want {
			t.Fatalf("round %d: session.mode %s acknowledged, then the call was %s (%s), want %s", i, mode, got, why, want)
		}
	}
}

// TestDeactivationSharedAtOnce: docs/protocol.md 4.2, "Activation is
// per session, stored in KV, and shared by every router at once." With
// several routers, a call sent right after a deactivation was acknowledged
// (session.activate with "active": false here; reset_tools behaves the
// same) sometimes still runs the tool of the deactivated group on another
// router, whose session cache lags (routers re-read KV only when a tool
// looks inactive, not when it looks active). It is a race: the test tries
// many times.
func TestDeactivationSharedAtOnce(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("gt", M{"groups": []string{"x"}}), def("anchor")},
		[]M{{"name": "x", "description": "X.", "scope": "external"}}, echo)
	s.waitListed(t, "probe", "anchor")
	for range 4 {
		s.addRouter()
	}
	for i := range 150 {
		s.adminOK(t, "session.activate", "s1", M{"groups": []string{"x"}, "active": true})
		s.adminOK(t, "session.activate", "s1", M{"groups": []string{"x"}, "active": false})
		r := s.call(t, "s1", fmt.Sprintf("r%d", i), callsData(Call{ID: "c1", Name: "gt"}))
		if r.Results[0].State == "success" {
			t.Fatalf("round %d: group x deactivated (acknowledged), yet its tool ran: %s", i, jsonOf(r.Results[0]))
		}
	}
}
