package bus_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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
	got, err := bus.Decode(&nats.Msg{Data: b})
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
	bm := bus.BinaryMsg("", e)
	h2, body := bm.Header, bm.Data
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
		// Found by FuzzDecode (protocol 1.7): the bytes 0xd3 0x4d 0x34 are not JSON.
		"base64 not json": `{"specversion":"1.0","id":"x","source":"a","type":"t","data_base64":"0000"}`,
		"both data":       `{"specversion":"1.0","id":"x","source":"a","type":"t","data":{},"data_base64":"e30="}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := bus.Decode(&nats.Msg{Data: []byte(body)})
			if !errors.Is(err, bus.ErrBadEvent) {
				t.Fatalf("err = %v, want bad_event", err)
			}
		})
	}
}

// A binary-mode event's data that starts as the plain form and is not JSON
// is refused (validJSON's fast read stops short of the end).
func TestDecodeBinaryRejectsData(t *testing.T) {
	for _, body := range []string{`{"a":1}x`, `{} {}`, `[1,]`, `{"a":"b"`} {
		e := bus.Head("t", "a")
		e.Data = []byte(body)
		if _, err := bus.Decode(bus.BinaryMsg("s", &e)); !errors.Is(err, bus.ErrBadEvent) {
			t.Errorf("%s: err = %v, want bad_event", body, err)
		}
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
	if s.Call("s1") != "toolbus.call.s1" || s.Stream(bus.StreamEvents) != "TOOLBUS_EVENTS" || s.Bucket(bus.BucketTools) != "toolbus_tools" || s.Workers.ExecQueue("x") != "toolbus-exec-x" {
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
		if _, err := bus.Decode(&nats.Msg{Data: b}); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func TestEncodeMatchesEncodingJSON(t *testing.T) {
	for _, e := range []*bus.Event{
		{SpecVersion: "1.0", ID: "x", Source: "s", Type: "t"},
		{SpecVersion: "1.0", ID: "a\"b\\c\n\t\r\x01é\u2028", Source: "toolbus/router/1", Type: "t", Subject: "c1",
			DataContentType: "application/json", Time: "2026-01-01T00:00:00Z", SessionID: "s", ReplyID: "r", ToolCallID: "c",
			TraceParent: "00-1-2-01", TraceState: "k=v", ExpiryTime: "2026-01-01T00:00:00Z", Data: json.RawMessage(`{"a":[1,2,{"b":null}]}`)},
		{SpecVersion: "1.0", ID: "bad\xffutf8", Source: "s", Type: "t", Data: json.RawMessage(`"str"`)},
	} {
		got, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		want, _ := json.Marshal(e)
		_ = json.Unmarshal(want, &b)
		if diff := cmp.Diff(b, a); diff != "" {
			t.Errorf("hand encoding differs from encoding/json: %s", diff)
		}
	}
	if _, err := (&bus.Event{SpecVersion: "1.0", ID: "x", Source: "s", Type: "t", Data: json.RawMessage(`{bad`)}).Encode(); err == nil {
		t.Error("invalid data encoded")
	}
}

func BenchmarkEncode(b *testing.B) {
	e, _ := bus.NewEvent(bus.TypeCallResult, "toolbus/router/abc", bus.Result{ID: "c1", Name: "echo", State: "success", Output: bus.Text("hello")})
	e.SessionID, e.ReplyID, e.ToolCallID = "s1", "r1", "c1"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	e, _ := bus.NewEvent(bus.TypeCallBatch, "agent", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}}})
	e.SessionID = "s1"
	data, _ := e.Encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bus.Decode(&nats.Msg{Data: data}); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeMatchesEncodingJSON checks the structured decoder (goccy/go-json)
// against encoding/json on the same input.
func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"a","type":"t","data":{"calls":[{"id":"c","name":"n","input":"{\"a\":1}"}]}}`))
	f.Add([]byte(` { "id" : "a\u00e9\"" , "x" : [1,{"y":"}"}], "data" : "s" , "id":"b"} `))
	f.Add([]byte(`{"sessionid":null,"data":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var want bus.Event
		wantErr := json.Unmarshal(body, &want)
		got, err := bus.Decode(&nats.Msg{Data: body})
		if err != nil {
			return // rejected; encoding/json may accept what Validate refuses
		}
		if wantErr != nil {
			t.Fatalf("accepted what encoding/json rejects (%v): %q", wantErr, body)
		}
		if got.ID != want.ID || got.Type != want.Type || got.SessionID != want.SessionID || got.Source != want.Source {
			t.Fatalf("attributes differ: %+v vs %+v", got, want)
		}
		if len(got.Data) > 0 && !json.Valid(got.Data) {
			t.Fatalf("data is not JSON: %q", got.Data)
		}
	})
}

func TestEventTimeIsRFC3339(t *testing.T) {
	for range 3 {
		e, err := bus.NewEvent(bus.TypeCallResult, "s", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(time.RFC3339Nano, e.Time); err != nil || !strings.HasSuffix(e.Time, "Z") {
			t.Fatalf("time %q: %v", e.Time, err)
		}
	}
}
