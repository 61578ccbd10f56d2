package bus_test

import (
	"encoding/json"
	"errors"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

func TestStructuredRoundTripWithSDK(t *testing.T) {
	e, err := bus.NewEvent(bus.TypeCallBatch, "agent/a", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"x":1}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID, e.ReplyID, e.TraceParent = "s1", "r1", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	m, err := e.Msg("toolbus.call.s1")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("content-type"); got != bus.ContentTypeEvent {
		t.Fatalf("content-type = %q", got)
	}
	if got := m.Header.Get("traceparent"); got != e.TraceParent {
		t.Fatalf("traceparent header = %q", got)
	}
	// sdk-go reads what we write.
	var ce cloudevents.Event
	if err := json.Unmarshal(m.Data, &ce); err != nil {
		t.Fatalf("sdk-go cannot read our event: %v", err)
	}
	if err := ce.Validate(); err != nil {
		t.Fatalf("sdk-go says invalid: %v", err)
	}
	if ce.Extensions()["sessionid"] != "s1" || ce.Type() != bus.TypeCallBatch {
		t.Fatalf("sdk-go read %v", ce)
	}
	// We read what sdk-go writes.
	b, err := json.Marshal(ce)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bus.DecodeStructured(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(e.Data), string(got.Data)); diff != "" {
		t.Fatalf("data differs: %s", diff)
	}
	if got.SessionID != "s1" || got.ReplyID != "r1" || got.ID != e.ID {
		t.Fatalf("attributes lost: %+v", got)
	}
}

func TestBinaryMode(t *testing.T) {
	h := nats.Header{}
	h.Set("CE-SpecVersion", "1.0")
	h["Ce-Id"] = []string{"r1"}
	h["ce-source"] = []string{"agent%2Fa"}
	h["ce-type"] = []string{bus.TypeCallBatch}
	h["ce-sessionid"] = []string{"s1"}
	h["Content-Type"] = []string{"application/json"}
	m := &nats.Msg{Header: h, Data: []byte(`{"calls":[]}`)}
	e, err := bus.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	if e.Source != "agent/a" || e.SessionID != "s1" || e.ID != "r1" || string(e.Data) != `{"calls":[]}` {
		t.Fatalf("decoded %+v", e)
	}
	h2, body := bus.EncodeBinary(e)
	e2, err := bus.Decode(&nats.Msg{Header: h2, Data: body})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e, e2); diff != "" {
		t.Fatal(diff)
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, body := range map[string]string{
		"empty":       ``,
		"not json":    `hello`,
		"array":       `[1]`,
		"no id":       `{"specversion":"1.0","source":"a","type":"t"}`,
		"bad version": `{"specversion":"0.3","id":"x","source":"a","type":"t"}`,
		"bad session": `{"specversion":"1.0","id":"x","source":"a","type":"t","sessionid":"a.b"}`,
		"number ext":  `{"specversion":"1.0","id":"x","source":"a","type":"t","sessionid":5}`,
		"bad time":    `{"specversion":"1.0","id":"x","source":"a","type":"t","time":"yesterday"}`,
		"xml":         `{"specversion":"1.0","id":"x","source":"a","type":"t","datacontenttype":"application/xml"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := bus.DecodeStructured([]byte(body))
			if !errors.Is(err, bus.ErrBadEvent) {
				t.Fatalf("err = %v, want bad_event", err)
			}
		})
	}
}

func TestToolDefDefaults(t *testing.T) {
	var d bus.ToolDef
	if err := json.Unmarshal([]byte(`{"name":"x","input_schema":{"type":"object"}}`), &d); err != nil {
		t.Fatal(err)
	}
	if !d.ConcurrencySafe || d.TimeoutMS != bus.DefaultTimeoutMS || d.MaxAttempts != 1 || d.Permission != "passthrough" || d.RuleMatcher != "none" {
		t.Fatalf("defaults not applied: %+v", d)
	}
	if err := json.Unmarshal([]byte(`{"name":"x","concurrency_safe":false}`), &d); err != nil || d.ConcurrencySafe {
		t.Fatalf("explicit false lost: %+v %v", d, err)
	}
}

func TestIDs(t *testing.T) {
	for s, want := range map[string]bool{"a": true, "A-z_09": true, "": false, "a.b": false, "a b": false, "ü": false, "*": false, ">": false} {
		if bus.ValidID(s) != want {
			t.Errorf("ValidID(%q) = %v", s, !want)
		}
	}
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	if bus.ValidID(string(long)) || !bus.ValidID(string(long[:128])) || bus.ValidName(string(long[:65])) {
		t.Error("length limits")
	}
}

func TestSubjects(t *testing.T) {
	s := bus.NewSubjects("")
	if s.Call("s1") != "toolbus.call.s1" || s.Stream(bus.StreamEvents) != "TOOLBUS_EVENTS" || s.Bucket(bus.BucketTools) != "toolbus_tools" || s.ExecQueue("x") != "toolbus-exec-x" {
		t.Fatal("subject names")
	}
	if tok, ok := s.Token("toolbus.call.s1", "call"); !ok || tok != "s1" {
		t.Fatal("token")
	}
	for _, bad := range []string{"toolbus.call.", "toolbus.call.a.b", "toolbus.calls.a", "other.call.a"} {
		if _, ok := s.Token(bad, "call"); ok {
			t.Errorf("Token(%q) accepted", bad)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"a","type":"t","data":{"calls":[]}}`), "", "")
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"a","type":"t","data_base64":"e30="}`), "", "")
	f.Add([]byte(`{}`), "1.0", "x%20y")
	f.Fuzz(func(t *testing.T, body []byte, specHeader, idHeader string) {
		m := &nats.Msg{Data: body}
		if specHeader != "" || idHeader != "" {
			m.Header = nats.Header{"ce-specversion": {specHeader}, "ce-id": {idHeader}, "ce-source": {"s"}, "ce-type": {"t"}}
		}
		e, err := bus.Decode(m)
		if err != nil {
			if !errors.Is(err, bus.ErrBadEvent) {
				t.Fatalf("non bad_event error %v", err)
			}
			return
		}
		if e.Validate() != nil {
			t.Fatal("decoded event does not validate")
		}
		b, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.DecodeStructured(b); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
