package conformance

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// routerSubjects are the request/reply subjects a router answers, with the
// event type each expects (docs/protocol.md 2).
func routerSubjects(s *sys) []struct{ name, subject, typ string } {
	return []struct{ name, subject, typ string }{
		{"call", s.subj("call", "s1"), tCallBatch},
		{"tools", s.subj("tools", "s1"), tToolsQuery},
		{"register", s.subj("register"), tRegister},
		{"admin", s.subj("admin", "session", "get"), tAdmin},
		{"answer", s.subj("answer", "some_tool"), tAnswer},
	}
}

// rawStructured returns a structured-mode message with body b.
func rawStructured(subject string, b []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set("content-type", ctEvent)
	m.Data = b
	return m
}

// envelope returns a structured CloudEvent as a JSON object with the
// required attributes of typ, for tests that break one of them.
func envelope(typ string, data any) M {
	return M{"specversion": "1.0", "id": nextID("ev"), "source": agentSource, "type": typ,
		"datacontenttype": ctJSON, "time": "2026-01-02T03:04:05Z", "sessionid": "s1", "replyid": "r1",
		"toolcallid": "c1", "data": data}
}

// TestMalformedEnvelopeOnEveryRouterSubject: anything that is not a valid
// CloudEvent of the right type is answered with io.toolbus.error bad_event
// on every router subject (docs/protocol.md 1).
func TestMalformedEnvelopeOnEveryRouterSubject(t *testing.T) {
	s := start(t)
	breakers := []struct {
		name string
		body func(typ string) []byte
	}{
		{"empty body", func(string) []byte { return nil }},
		{"not JSON", func(string) []byte { return []byte("hello, router") }},
		{"truncated JSON", func(typ string) []byte { b, _ := json.Marshal(envelope(typ, M{})); return b[:len(b)-3] }},
		{"JSON array", func(string) []byte { return []byte(`[{"specversion":"1.0"}]`) }},
		{"JSON string", func(string) []byte { return []byte(`"io.toolbus.call.batch"`) }},
		{"object that is not a CloudEvent", func(string) []byte { return []byte(`{"calls":[{"id":"c1","name":"x"}]}`) }},
		{"specversion 0.3", func(typ string) []byte { return mutate(envelope(typ, M{}), "specversion", "0.3") }},
		{"specversion missing", func(typ string) []byte { return mutate(envelope(typ, M{}), "specversion", nil) }},
		{"id missing", func(typ string) []byte { return mutate(envelope(typ, M{}), "id", nil) }},
		{"id empty", func(typ string) []byte { return mutate(envelope(typ, M{}), "id", "") }},
		{"source missing", func(typ string) []byte { return mutate(envelope(typ, M{}), "source", nil) }},
		{"type missing", func(typ string) []byte { return mutate(envelope(typ, M{}), "type", nil) }},
		{"wrong type for the subject", func(typ string) []byte {
			other := tCallBatch
			if typ == tCallBatch {
				other = tToolsQuery
			}
			return mutate(envelope(typ, M{}), "type", other)
		}},
		{"reply type sent as a request", func(typ string) []byte { return mutate(envelope(typ, M{}), "type", typ+".reply") }},
		{"datacontenttype not JSON", func(typ string) []byte {
			return mutate(envelope(typ, M{}), "datacontenttype", "text/plain")
		}},
		{"sessionid not an identifier", func(typ string) []byte { return mutate(envelope(typ, M{}), "sessionid", "s 1") }},
		{"sessionid too long", func(typ string) []byte {
			return mutate(envelope(typ, M{}), "sessionid", strings.Repeat("s", 129))
		}},
		{"replyid not an identifier", func(typ string) []byte { return mutate(envelope(typ, M{}), "replyid", "r.1") }},
		{"toolcallid not an identifier", func(typ string) []byte { return mutate(envelope(typ, M{}), "toolcallid", "c/1") }},
		{"expirytime not RFC 3339", func(typ string) []byte {
			return mutate(envelope(typ, M{}), "expirytime", "tomorrow")
		}},
	}
	for _, sub := range routerSubjects(s) {
		for _, br := range breakers {
			t.Run(sub.name+"/"+br.name, func(t *testing.T) {
				e := s.request(t, rawStructured(sub.subject, br.body(sub.typ)))
				wantError(t, e, "bad_event", "")
			})
		}
	}
	// The router neither crashed nor stalled.
	s.serve(t, echo, def("ping"))
	r := s.call(t, "s1", "after", callsData(Call{ID: "c1", Name: "ping"}))
	wantSuccess(t, r.Results[0], "ping ran")
}

// mutate sets (or, with nil, removes) one attribute and encodes the event.
func mutate(ev M, k string, v any) []byte {
	if v == nil {
		delete(ev, k)
	} else {
		ev[k] = v
	}
	b, _ := json.Marshal(ev)
	return b
}

// TestSessionIDDiffersFromSubject: a sessionid attribute that differs from
// the subject's session token is bad_event (docs/protocol.md 1), on call and tools.
func TestSessionIDDiffersFromSubject(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("ping"))
	e := s.request(t, batch("other", "r1", callsData(Call{ID: "c1", Name: "ping"})).msg(t, s.subj("call", "s1")))
	wantError(t, e, "bad_event", "")
	o := out{typ: tToolsQuery, data: M{}, attrs: map[string]string{"sessionid": "other"}}
	wantError(t, s.request(t, o.msg(t, s.subj("tools", "s1"))), "bad_event", "")
	if n := w.execs.Load(); n != 0 {
		t.Fatalf("a rejected batch ran %d calls", n)
	}
}

// TestSubjectSessionTokenNotAnIdentifier: the session token of the subject
// must be an identifier too.
func TestSubjectSessionTokenNotAnIdentifier(t *testing.T) {
	s := start(t)
	for _, tok := range []string{"s$1", "s@1", strings.Repeat("x", 129)} {
		t.Run(tok[:min(len(tok), 8)], func(t *testing.T) {
			o := batch("", "r1", callsData(Call{ID: "c1", Name: "ping"}))
			delete(o.attrs, "sessionid")
			wantError(t, s.request(t, o.msg(t, s.subj("call", tok))), "bad_event", "")
		})
	}
}

// TestBatchBadIdentifiers: the reply id (the batch's id) and every call id
// must match ^[A-Za-z0-9_-]{1,128}$; otherwise bad_event and nothing runs.
func TestBatchBadIdentifiers(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("ping"))
	good := Call{ID: "c1", Name: "ping"}
	cases := []struct {
		name    string
		replyID string
		calls   []Call
	}{
		{"reply id with a dot", "r.1", []Call{good}},
		{"reply id with a space", "r 1", []Call{good}},
		{"reply id too long", strings.Repeat("r", 129), []Call{good}},
		{"call id with a dot", "r1", []Call{good, {ID: "c.2", Name: "ping"}}},
		{"call id empty", "r2", []Call{good, {ID: "", Name: "ping"}}},
		{"call id too long", "r3", []Call{good, {ID: strings.Repeat("c", 129), Name: "ping"}}},
		{"call id with a star", "r4", []Call{{ID: "*", Name: "ping"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, s.callRaw(t, "s1", tc.replyID, M{"calls": tc.calls}), "bad_event", "")
		})
	}
	// 128 characters are fine.
	long := strings.Repeat("a", 128)
	r := s.call(t, long, long, callsData(Call{ID: long, Name: "ping"}))
	wantSuccess(t, r.Results[0], "ping ran")
	if n := w.execs.Load(); n != 1 {
		t.Fatalf("worker ran %d calls, want only the valid batch's one", n)
	}
}

// TestBatchBadRequests: a well-formed batch that asks for something invalid
// is bad_request, answered with io.toolbus.error, and runs nothing
// (docs/protocol.md 1 and 3.2).
func TestBatchBadRequests(t *testing.T) {
	s := start(t)
	w := s.serve(t, echo, def("ping"))
	ev := s.watch(t, "s1")
	many := make([]Call, 65)
	for i := range many {
		many[i] = Call{ID: fmt.Sprintf("c%d", i), Name: "ping"}
	}
	ping := Call{ID: "c1", Name: "ping"}
	cases := []struct {
		name string
		data M
		msg  string
	}{
		{"no calls", M{"calls": []Call{}}, ""},
		{"calls absent", M{"user": "alice"}, ""},
		{"65 calls", M{"calls": many}, ""},
		{"duplicate call ids", M{"calls": []Call{ping, {ID: "c2", Name: "ping"}, ping}}, ""},
		{"unknown merge mode", M{"calls": []Call{ping}, "request": M{"merge_mode": "both"}}, ""},
		{"external tool with a bad name", M{"calls": []Call{ping}, "request": M{"external_tools": []M{
			{"name": "pick.file", "description": "x", "input_schema": M{"type": "object", "properties": M{}}}}}}, ""},
		{"external tool schema not an object schema", M{"calls": []Call{ping}, "request": M{"external_tools": []M{
			{"name": "pick_file", "description": "x", "input_schema": M{"type": "string"}}}}}, ""},
		{"agent_only with external tools", M{"calls": []Call{ping}, "request": M{"merge_mode": "agent_only", "external_tools": []M{
			{"name": "pick_file", "description": "x", "input_schema": M{"type": "object", "properties": M{}}}}}},
			"agent_only cannot include external tools"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, s.callRaw(t, "s1", fmt.Sprintf("bad%d", i), tc.data), "bad_request", tc.msg)
		})
	}
	if n := w.execs.Load(); n != 0 {
		t.Fatalf("rejected batches ran %d calls", n)
	}
	// A rejected batch publishes no events: the next events are those of a
	// valid batch.
	s.call(t, "s1", "good", callsData(ping))
	es := ev.until(doneOf("good"))
	for _, e := range es {
		if e.ReplyID != "good" {
			t.Errorf("event %s of rejected batch %s", e.Type, e.ReplyID)
		}
	}
}

// TestBatch64CallsIsTheLimit: 64 calls are allowed.
func TestBatch64CallsIsTheLimit(t *testing.T) {
	s := start(t)
	calls := make([]Call, 64)
	ids := make([]string, 64)
	for i := range calls {
		ids[i] = fmt.Sprintf("c%02d", i)
		calls[i] = Call{ID: ids[i], Name: "nope"}
	}
	r := s.call(t, "s1", "r64", M{"calls": calls})
	wantIDs(t, "reply", r.Results, ids...)
}

// TestBatchWithoutSessionID: a batch without the sessionid attribute takes
// the session from the subject (docs/protocol.md, Decision).
func TestBatchWithoutSessionID(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("ping"))
	o := batch("", "r1", callsData(Call{ID: "c1", Name: "ping"}))
	delete(o.attrs, "sessionid")
	e := s.request(t, o.msg(t, s.subj("call", "s1")))
	r := s.wantReply(t, e, "s1", "r1")
	wantSuccess(t, r.Results[0], "ping ran")
}

// TestBinaryMode: receivers accept binary mode: ce- headers, values
// percent-encoded, header names read case-insensitively, body = data
// (docs/protocol.md 1). Replies come back in structured mode.
func TestBinaryMode(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) { c.text("user " + string(c.User)) }, def("ping"))

	t.Run("call", func(t *testing.T) {
		o := batch("s1", "rb1", M{"calls": []Call{{ID: "c1", Name: "ping"}}, "user": "alice"})
		o.attrs["source"] = "urn:agent:caf%C3%A9 1" // header ce-source: urn:agent:caf%25C3%25A9%201
		e := s.request(t, o.binaryMsg(t, s.subj("call", "s1")))
		r := s.wantReply(t, e, "s1", "rb1")
		wantSuccess(t, r.Results[0], `user "alice"`)
	})
	t.Run("percent-encoded identifiers are decoded", func(t *testing.T) {
		o := batch("s1", "rb2", callsData(Call{ID: "c1", Name: "ping"}))
		m := o.binaryMsg(t, s.subj("call", "s1"))
		m.Header.Set("ce-sessionid", "%73%31") // "s1"
		m.Header.Set("ce-id", "rb%32")         // "rb2"
		r := s.wantReply(t, s.request(t, m), "s1", "rb2")
		wantIDs(t, "reply", r.Results, "c1")
	})
	t.Run("header names in any case", func(t *testing.T) {
		o := batch("s1", "rb3", callsData(Call{ID: "c1", Name: "ping"}))
		m := o.binaryMsg(t, s.subj("call", "s1"))
		h := nats.Header{}
		for k, v := range m.Header {
			switch k {
			case "ce-specversion":
				k = "CE-SpecVersion"
			case "ce-type":
				k = "Ce-Type"
			case "ce-id":
				k = "cE-iD"
			case "content-type":
				k = "Content-Type"
			}
			h[k] = v
		}
		m.Header = h
		r := s.wantReply(t, s.request(t, m), "s1", "rb3")
		wantSuccess(t, r.Results[0], "user null") // no user in the batch: exec data says "user": null
	})
	t.Run("tools query", func(t *testing.T) {
		o := out{typ: tToolsQuery, data: M{"format": "anthropic"}, attrs: map[string]string{"sessionid": "s1"}}
		e := s.request(t, o.binaryMsg(t, s.subj("tools", "s1")))
		if e.Type != tToolsList {
			t.Fatalf("reply %s %s", e.Type, e.Data)
		}
	})
	t.Run("admin", func(t *testing.T) {
		o := out{typ: tAdmin, data: M{}, attrs: map[string]string{"sessionid": "s1"}}
		e := s.request(t, o.binaryMsg(t, s.subj("admin", "session", "get")))
		if e.Type != tAdminReply {
			t.Fatalf("reply %s %s", e.Type, e.Data)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		for name, mod := range map[string]func(m *nats.Msg){
			"bad percent-encoding": func(m *nats.Msg) { m.Header.Set("ce-source", "a%zzb") },
			"body not JSON":        func(m *nats.Msg) { m.Data = []byte("calls: c1") },
			"specversion missing":  func(m *nats.Msg) { m.Header.Del("ce-specversion") },
			"wrong type":           func(m *nats.Msg) { m.Header.Set("ce-type", tToolsQuery) },
			"sessionid differs":    func(m *nats.Msg) { m.Header.Set("ce-sessionid", "s2") },
			"reply id invalid":     func(m *nats.Msg) { m.Header.Set("ce-id", "r%2E1") }, // "r.1"
		} {
			t.Run(name, func(t *testing.T) {
				o := batch("s1", "rbad", callsData(Call{ID: "c1", Name: "ping"}))
				m := o.binaryMsg(t, s.subj("call", "s1"))
				mod(m)
				wantError(t, s.request(t, m), "bad_event", "")
			})
		}
	})
}

// TestStructuredModeWithoutContentTypeHeader: the header is what senders
// set; a structured event without it is still read (the body is a
// CloudEvent, and there are no ce- headers).
func TestStructuredModeWithoutContentTypeHeader(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("ping"))
	m := batch("s1", "r1", callsData(Call{ID: "c1", Name: "ping"})).msg(t, s.subj("call", "s1"))
	m.Header = nil
	r := s.wantReply(t, s.request(t, m), "s1", "r1")
	wantSuccess(t, r.Results[0], "ping ran")
}

// TestUnknownExtensionAttributesIgnored: CloudEvents receivers ignore
// extension attributes they do not know.
func TestUnknownExtensionAttributesIgnored(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("ping"))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "ping"}), "myext", "x", "dataschema", "https://example.com/s")
	wantSuccess(t, r.Results[0], "ping ran")
}

// TestMalformedWithoutReplySubject: malformed messages without a reply
// subject are dropped silently; the router keeps serving.
func TestMalformedWithoutReplySubject(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("ping"))
	for _, sub := range routerSubjects(s) {
		s.send(t, rawStructured(sub.subject, []byte("garbage")))
		s.send(t, rawStructured(sub.subject, mutate(envelope(sub.typ, M{}), "specversion", "2")))
	}
	s.send(t, rawStructured(s.subj("cancel", "s1"), []byte("garbage")))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "ping"}))
	wantSuccess(t, r.Results[0], "ping ran")
}

// TestRouterSubscriptions: routers serve the router subjects in queue group
// P-router, and P.cancel.> on a plain subscription (docs/protocol.md 2), as the
// server's own subscription list shows.
func TestRouterSubscriptions(t *testing.T) {
	s := start(t)
	s.addRouter()
	sz, err := s.srv.Subsz(&server.SubszOptions{Subscriptions: true, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, d := range sz.Subs {
		count[d.Subject+" queue="+d.Queue]++
	}
	for _, want := range []string{
		"toolbus.call.> queue=toolbus-router",
		"toolbus.tools.> queue=toolbus-router",
		"toolbus.answer.> queue=toolbus-router",
		"toolbus.approve.> queue=toolbus-router",
		"toolbus.replay.> queue=toolbus-router",
		"toolbus.register queue=toolbus-router",
		"toolbus.register.> queue=toolbus-router",
		"toolbus.admin.> queue=toolbus-router",
		"toolbus.cancel.> queue=",
	} {
		if count[want] != 2 {
			t.Errorf("%q: %d subscriptions, want one per router (2); all: %v", want, count[want], count)
		}
	}
}

// TestTwoRoutersAnswerOnce: routers are interchangeable; a request reaches
// one of them only.
func TestTwoRoutersAnswerOnce(t *testing.T) {
	s := start(t)
	s.addRouter()
	inbox := nats.NewInbox()
	replies := s.subscribe(t, inbox)
	for range 10 {
		m := out{typ: tToolsQuery, data: M{}, attrs: map[string]string{"sessionid": "s1"}}.msg(t, s.subj("tools", "s1"))
		m.Reply = inbox
		s.send(t, m)
	}
	for range 10 {
		if e := replies.next(); e.Type != tToolsList {
			t.Fatalf("reply %s", e.Type)
		}
	}
	// One more round trip: no eleventh reply arrives behind it.
	s.list(t, "s1", nil)
	if extra := replies.pending(); len(extra) != 0 {
		t.Fatalf("%d extra replies", len(extra))
	}
}

// TestBinaryModeFromWorkersAndHandlers: the router, as a receiver, accepts
// binary mode from workers (exec.result), external handlers (answer) and
// registrations.
func TestBinaryModeFromWorkersAndHandlers(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		if !c.replied.CompareAndSwap(false, true) {
			return
		}
		o := out{typ: tExecResult, data: M{"state": "success", "output": []Block{{Type: "text", Text: "binary ok"}}},
			attrs: map[string]string{"source": "toolbus/worker/bin", "sessionid": c.ev.SessionID, "replyid": c.ev.ReplyID,
				"toolcallid": c.ev.ToolCallID}}
		_ = c.w.nc.PublishMsg(o.binaryMsg(t, c.ev.Msg.Reply))
	}, def("bin"))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "bin"}))
	wantSuccess(t, r.Results[0], "binary ok")

	o := out{typ: tRegister, data: M{"worker": "wbin", "tools": []M{def("handoff", M{"external": true})}},
		attrs: map[string]string{"source": "toolbus/worker/wbin"}}
	decodeAck(t, s.request(t, o.binaryMsg(t, "toolbus.register")))
	ev := s.watch(t, "s1")
	s.call(t, "s1", "r2", callsData(Call{ID: "c1", Name: "handoff"}))
	o = out{typ: tAnswer, data: textAnswer("success", "answered in binary mode"),
		attrs: map[string]string{"sessionid": "s1", "replyid": "r2", "toolcallid": "c1"}}
	if e := s.request(t, o.binaryMsg(t, "toolbus.answer.handoff")); e.Type != tAnswerAck {
		t.Fatalf("answer: %s %s", e.Type, e.Data)
	}
	done := checkBatchEvents(t, ev.until(doneOf("r2")), "s1", "r2", "c1")
	wantSuccess(t, done[0], "answered in binary mode")
}

// TestDeeplyNestedJSON: absurdly nested JSON is answered (an error event or
// an error result), never crashes or stalls the router (docs/protocol.md 1).
func TestDeeplyNestedJSON(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("ping"))
	const n = 20000
	deep := strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n)
	for i, in := range []string{deep, `{"x":` + strings.Repeat(`[`, n) + strings.Repeat("]", n) + `}`,
		`"` + strings.ReplaceAll(deep, `"`, `\"`) + `"`} {
		body := fmt.Sprintf(`{"specversion":"1.0","id":"deep%d","source":"a","type":"io.toolbus.call.batch",`+
			`"data":{"calls":[{"id":"c1","name":"ping","input":%s}]}}`, i, in)
		e := s.request(t, rawStructured("toolbus.call.s1", []byte(body)))
		if e.Type == tCallReply {
			r := s.wantReply(t, e, "s1", fmt.Sprintf("deep%d", i))
			wantFailure(t, r.Results[0], "error", "invalid_input", "")
		} else if e.Type != tError {
			t.Fatalf("reply %s", e.Type)
		}
	}
	r := s.call(t, "s1", "after", callsData(Call{ID: "c1", Name: "ping"}))
	wantSuccess(t, r.Results[0], "ping ran")
}
