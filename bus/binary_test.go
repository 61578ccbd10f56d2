package bus_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// execEvent is an io.toolbus.exec as a router sends it.
func execEvent(t testing.TB) *bus.Event {
	t.Helper()
	e, err := bus.NewEvent(bus.TypeExec, "toolbus/router/r1", bus.ExecRequest{
		Call: bus.Call{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID, e.ReplyID, e.ToolCallID = "s1", "r1", "c1"
	e.ExpiryTime = "2030-01-02T03:04:05.006Z"
	return e
}

// TestBinaryMsgRoundTrip: BinaryMsg is what Decode reads back, attribute
// for attribute, with values that need percent-encoding and values that
// need none; IsBinary tells the two modes apart.
func TestBinaryMsgRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*bus.Event)
	}{
		{"plain", func(*bus.Event) {}},
		{"trace", func(e *bus.Event) {
			e.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			e.TraceState = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
		}},
		{"source needing escapes", func(e *bus.Event) { e.Source = "my agent/ü%20x" }},
		{"subject", func(e *bus.Event) { e.Subject = "c1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := execEvent(t)
			tc.edit(e)
			m := bus.BinaryMsg("toolbus.exec.echo", e)
			if !bus.IsBinary(m.Header) {
				t.Fatal("not binary")
			}
			got, err := bus.Decode(m)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := json.Marshal(e)
			b, _ := json.Marshal(got)
			if string(a) != string(b) {
				t.Fatalf("round trip\n got %s\nwant %s", b, a)
			}
			sm, err := e.Msg("x")
			if err != nil {
				t.Fatal(err)
			}
			if bus.IsBinary(sm.Header) {
				t.Fatal("structured message taken for binary")
			}
		})
	}
}

// FuzzBinaryExecHeaders: the ce- headers of an exec request or result
// (docs/protocol.md 1, 5.1) as anyone may send them. Decode never panics;
// it accepts or refuses with bad_event; what it accepts, BinaryMsg encodes
// back to a message that decodes to the same event.
func FuzzBinaryExecHeaders(f *testing.F) {
	f.Add("1.0", "id1", "toolbus/router/r1", bus.TypeExec, "s1", "r1", "c1", "", "Ce-Id", "id1", []byte(`{"call":{"id":"c1","name":"echo"}}`))
	f.Add("1.0", "id1", "src", bus.TypeExecResult, "s1", "r1", "c1", "2030-01-02T03:04:05Z", "ce-id", "other", []byte(`{"state":"success","output":[]}`))
	f.Add("1.0", "%ZZ", "src", bus.TypeExec, "s1", "r1", "c1", "", "content-type", "text/plain", []byte(`{}`))
	f.Add("1.0", "id", "s%C3%28", bus.TypeExec, "", "", "", "", "ce-specversion", "0.3", []byte(`not json`))
	f.Add("", "", "", "", "", "", "", "", "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, spec, id, source, typ, session, reply, call, expiry, extraKey, extraVal string, body []byte) {
		h := nats.Header{}
		for k, v := range map[string]string{"ce-specversion": spec, "ce-id": id, "ce-source": source, "ce-type": typ,
			"ce-sessionid": session, "ce-replyid": reply, "ce-toolcallid": call, "ce-expirytime": expiry} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		if extraKey != "" {
			h[extraKey] = append(h[extraKey], extraVal)
		}
		e, err := bus.Decode(&nats.Msg{Subject: "toolbus.exec.echo", Header: h, Data: body})
		if err != nil {
			var be *bus.Error
			if !errors.As(err, &be) || be.Code != bus.CodeBadEvent {
				t.Fatalf("refused with %v, want bad_event", err)
			}
			return
		}
		if e.DataContentType == "" {
			e.DataContentType = bus.ContentTypeJSON // BinaryMsg states the default
		}
		again, err := bus.Decode(bus.BinaryMsg("toolbus.exec.echo", e))
		if err != nil {
			t.Fatalf("re-encoded event refused: %v", err)
		}
		a, _ := json.Marshal(e)
		b, _ := json.Marshal(again)
		if string(a) != string(b) {
			t.Fatalf("not a fixed point\n got %s\nwant %s", b, a)
		}
		// The compact form carries the same event without the attributes
		// it drops (docs/protocol.md 5.1), and reads as compact.
		m := bus.CompactMsg("toolbus.exec.echo", e)
		compact, err := bus.Decode(m)
		if err != nil {
			t.Fatalf("compact form refused: %v", err)
		}
		e.Time, e.DataContentType, e.Subject = "", "", ""
		a, _ = json.Marshal(e)
		c, _ := json.Marshal(compact)
		if string(a) != string(c) || !bus.CompactForm(m.Header, compact) {
			t.Fatalf("compact form\n got %s\nwant %s", c, a)
		}
	})
}

// TestBinaryManyHeaders: past the attributes a message usually has, an
// attribute given twice with different values is still bad_event, and
// equal values are still accepted.
func TestBinaryManyHeaders(t *testing.T) {
	for _, differ := range []bool{false, true} {
		h := bus.BinaryMsg("x", execEvent(t)).Header
		for i := range 40 {
			h["ce-ext"+string(rune('a'+i%26))+string(rune('a'+i/26))] = []string{"v"}
		}
		h["ce-extab"] = []string{"v"}
		if differ {
			h["Ce-Extab"] = []string{"w"}
		} else {
			h["Ce-Extab"] = []string{"v"}
		}
		_, err := bus.Decode(&nats.Msg{Subject: "x", Header: h, Data: []byte(`{}`)})
		if differ != (err != nil) {
			t.Fatalf("differ %v: %v", differ, err)
		}
	}
}

// A reused header carries nothing of the message before it: an event
// without trace context after one with it has no traceparent, in either
// form; the compact form has no trace headers outside ce- at all.
func TestWithBinaryMsgReuse(t *testing.T) {
	with, _ := bus.NewEvent(bus.TypeExec, "r", json.RawMessage(`{}`))
	with.TraceParent, with.TraceState, with.SessionID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v", "s1"
	without, _ := bus.NewEvent(bus.TypeExecResult, "w", json.RawMessage(`{"state":"success","output":[]}`))
	for _, compact := range []bool{false, true} {
		for i, e := range []*bus.Event{with, without, with, without} {
			bus.WithBinaryMsg("x", e, compact, func(m *nats.Msg) {
				got, err := bus.Decode(m)
				if err != nil {
					t.Fatal(err)
				}
				plain := e.TraceParent
				if compact {
					plain = ""
				}
				if got.ID != e.ID || got.Type != e.Type || got.TraceParent != e.TraceParent || got.SessionID != e.SessionID ||
					m.Header.Get(bus.HeaderTraceParent) != plain || len(m.Header) == 0 || bus.CompactForm(m.Header, got) != compact {
					t.Fatalf("compact %v, message %d: decoded %+v from %v", compact, i, got, m.Header)
				}
			})
		}
	}
}

// TestCompactMsg: the compact form (docs/protocol.md 5.1, 5.2) holds the
// exec's attributes a worker reads, each as binary mode writes it, and
// none of those it drops; it decodes to the event without them, and a
// result's compact form is the four attributes CloudEvents requires.
func TestCompactMsg(t *testing.T) {
	dropped := []string{"ce-time", "ce-subject", "ce-datacontenttype", bus.HeaderContentType, bus.HeaderTraceParent, bus.HeaderTraceState}
	result, _ := bus.NewEvent(bus.TypeExecResult, "toolbus/worker/w1", json.RawMessage(`{"state":"success","output":[]}`))
	for _, tc := range []struct {
		name    string
		e       *bus.Event
		edit    func(*bus.Event)
		headers int
	}{
		{"exec", execEvent(t), func(*bus.Event) {}, 8},
		{"exec with trace context", execEvent(t), func(e *bus.Event) {
			e.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			e.TraceState = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
		}, 10},
		{"source and ids needing escapes", execEvent(t), func(e *bus.Event) { e.Source, e.ID = "my agent/ü%20x", "id with space" }, 8},
		{"subject dropped", execEvent(t), func(e *bus.Event) { e.Subject = "c1" }, 8},
		{"result", result, func(*bus.Event) {}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.edit(tc.e)
			m := bus.CompactMsg("toolbus.exec.echo", tc.e)
			if len(m.Header) != tc.headers {
				t.Fatalf("%d headers, want %d: %v", len(m.Header), tc.headers, m.Header)
			}
			for _, k := range dropped {
				if _, ok := m.Header[k]; ok {
					t.Fatalf("header %s is sent: %v", k, m.Header)
				}
			}
			var pooled nats.Header
			bus.WithBinaryMsg("toolbus.exec.echo", tc.e, true, func(p *nats.Msg) { pooled = cloneHeader(p.Header) })
			if !reflect.DeepEqual(pooled, m.Header) {
				t.Fatalf("WithBinaryMsg wrote %v, CompactMsg %v", pooled, m.Header)
			}
			got, err := bus.Decode(m)
			if err != nil {
				t.Fatal(err)
			}
			want := *tc.e
			want.Time, want.Subject, want.DataContentType = "", "", ""
			if !reflect.DeepEqual(*got, want) || !bus.CompactForm(m.Header, got) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", *got, want)
			}
			full := bus.BinaryMsg("toolbus.exec.echo", tc.e)
			if e, err := bus.Decode(full); err != nil || bus.CompactForm(full.Header, e) {
				t.Fatalf("the binary form reads as compact: %v", err)
			}
		})
	}
}

// TestCompactHeaderRules: section 1's header rules hold for the compact
// form as for binary mode: an unknown extension is ignored, an attribute
// given twice (two headers, or one header line repeated) is accepted with
// equal values and bad_event with different ones, a value that is not UTF-8 is bad_event; a content-type makes the
// message the binary form.
func TestCompactHeaderRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(nats.Header)
		ok      bool
		compact bool
	}{
		{"as sent", func(nats.Header) {}, true, true},
		{"unknown extension", func(h nats.Header) { h["ce-colour"] = []string{"blue"} }, true, true},
		{"twice, equal", func(h nats.Header) { h["Ce-Sessionid"] = []string{"s1"} }, true, true},
		{"twice, different", func(h nats.Header) { h["Ce-Sessionid"] = []string{"s2"} }, false, false},
		{"one header, two equal values", func(h nats.Header) { h["ce-replyid"] = append(h["ce-replyid"], "r%31") }, true, true},
		{"one header, two different values", func(h nats.Header) { h["ce-replyid"] = append(h["ce-replyid"], "r2") }, false, false},
		{"not UTF-8", func(h nats.Header) { h["ce-source"] = []string{"s%C3%28"} }, false, false},
		{"bad identifier", func(h nats.Header) { h["ce-toolcallid"] = []string{"c.1"} }, false, false},
		{"required attribute missing", func(h nats.Header) { delete(h, "ce-id") }, false, false},
		{"content-type: the binary form", func(h nats.Header) { h[bus.HeaderContentType] = []string{bus.ContentTypeJSON} }, true, false},
		{"ce-datacontenttype: the binary form", func(h nats.Header) { h["ce-datacontenttype"] = []string{bus.ContentTypeJSON} }, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := bus.CompactMsg("toolbus.exec.echo", execEvent(t))
			tc.edit(m.Header)
			e, err := bus.Decode(m)
			if (err == nil) != tc.ok {
				t.Fatalf("decode: %v, want ok %v", err, tc.ok)
			}
			var be *bus.Error
			if err != nil && (!errors.As(err, &be) || be.Code != bus.CodeBadEvent) {
				t.Fatalf("refused with %v, want bad_event", err)
			}
			if err == nil && (bus.CompactForm(m.Header, e) != tc.compact || e.SessionID != "s1" || e.ReplyID != "r1") {
				t.Fatalf("compact %v, want %v; %+v", bus.CompactForm(m.Header, e), tc.compact, e)
			}
		})
	}
}

// cloneHeader is a deep copy of h.
func cloneHeader(h nats.Header) nats.Header {
	c := nats.Header{}
	for k, vs := range h {
		c[k] = append([]string(nil), vs...)
	}
	return c
}

func TestIsBinaryHeaders(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    nats.Header
		want bool
	}{
		{"none", nil, false},
		{"content-type only", nats.Header{"content-type": {bus.ContentTypeEvent}}, false},
		{"Content-Type only", nats.Header{"Content-Type": {bus.ContentTypeEvent}}, false},
		{"one ce- header", nats.Header{"ce-id": {"1"}}, true},
		{"one CE- header", nats.Header{"CE-Type": {"x"}}, true},
		{"content-type and a ce- header", nats.Header{"content-type": {bus.ContentTypeJSON}, "Ce-Source": {"s"}}, true},
		{"ce-specversion", nats.Header{"ce-specversion": {"1.0"}, "content-type": {bus.ContentTypeJSON}}, true},
		{"structured with trace context", nats.Header{"content-type": {bus.ContentTypeEvent}, "traceparent": {"00-x"}}, false},
		{"a header named ce-", nats.Header{"ce-": {"x"}}, false},
	} {
		if got := bus.IsBinary(tt.h); got != tt.want {
			t.Errorf("%s: IsBinary(%v) = %v, want %v", tt.name, tt.h, got, tt.want)
		}
	}
}
