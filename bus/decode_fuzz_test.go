package bus_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// The fuzzers of this file cover every decoder of external input in bus:
// the ce- headers of binary mode, and the data of batches, answers,
// registrations, tool definitions, groups, queries, exec results and
// cancels. The property is the same for each: never a panic, and a value
// that decodes re-encodes to JSON that decodes to the same value (its
// encoding is a fixed point). Each runs its seeds in the ordinary go test
// run; go test -fuzz FuzzX -fuzztime 30s ./bus explores further.

// fixedPoint decodes b with decode; when that succeeds, the value's
// encoding must decode again, to a value with the same encoding.
func fixedPoint[T any](t *testing.T, b []byte, decode func([]byte) (T, error)) {
	t.Helper()
	v, err := decode(b)
	if err != nil {
		return
	}
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("decoded value does not encode: %v", err)
	}
	v2, err := decode(enc)
	if err != nil {
		t.Fatalf("re-decode of %s: %v", enc, err)
	}
	enc2, err := json.Marshal(v2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, enc2) {
		t.Fatalf("not a fixed point:\n%s\n%s", enc, enc2)
	}
}

// viaEvent decodes data the way receivers do: as an event's data.
func viaEvent[T any](b []byte) (T, error) {
	var v T
	err := (&bus.Event{Data: b}).DataAs(&v)
	return v, err
}

func seeds(f *testing.F, ss ...string) {
	for _, s := range ss {
		f.Add([]byte(s))
	}
}

func FuzzBatchData(f *testing.F) {
	seeds(f, `{"calls":[{"id":"toolu_01","name":"get_weather","input":{"city":"Oslo"}},{"id":"toolu_02","name":"deploy","input":"{\"env\": \"prod\"}"}],"user":"alice","context":{"tenant":"acme"},"request":{"merge_mode":"merge_external_priority","external_tools":[{"name":"pick_file","description":"d","input_schema":{"type":"object","properties":{}}}]}}`,
		`{"calls":[],"request":{"tools":[]}}`, `{"calls":null,"user":null}`, `{"calls":[{"id":1}]}`, `[]`, `{"request":{"external_tools":[1]}}`)
	f.Fuzz(func(t *testing.T, b []byte) { fixedPoint(t, b, viaEvent[bus.Batch]) })
}

func FuzzAnswerData(f *testing.F) {
	seeds(f, `{"state":"success","output":[{"type":"text","text":"/srv/a.txt"},{"type":"data","media_type":"image/png","data":"iVBO"},{"type":"data","media_type":"text/plain","url":"nats-object://toolbus_outputs/s.r.c.X.0","size":20971520}]}`,
		`{"confirmed":true,"input":{"env":"prod"},"rules":[{"tool":"deploy","pattern":"git:*","behavior":"allow"}]}`,
		`{"result":1}`, `{"output":[{"type":"text","extra":1}]}`, `null`, `{"confirmed":false,"state":"error"}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, viaEvent[bus.Answer])
		if a, err := viaEvent[bus.Answer](b); err == nil {
			_ = a.CheckKind(bus.KindConfirm)
			_ = a.CheckKind(bus.KindExternal)
		} else if !errors.Is(err, bus.ErrBadRequest) && json.Valid(b) && bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
			// a JSON object that is refused is refused as bad_request
			t.Fatalf("answer refused with %v", err)
		}
	})
}

func FuzzRegisterData(f *testing.F) {
	seeds(f, `{"worker":"w1","groups":[{"name":"ops","description":"Deploy.","instructions":"Staging first.","scope":"meta"}],"tools":[{"name":"get_weather","description":"Current weather.","read_only":true,"input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},{"name":"oops","parameters":{"type":"object"}}],"inflight":{"get_weather":["s.r.c"]}}`,
		`{"worker":"w1","leaving":true}`, `{"worker":"w","groups":[{"name":"g","tools":[]}]}`, `{"tools":[1,"x",null,{"name":2}]}`, `{"inflight":null}`)
	f.Fuzz(func(t *testing.T, b []byte) { fixedPoint(t, b, viaEvent[bus.Register]) })
}

func FuzzToolDef(f *testing.F) {
	seeds(f, `{"name":"deploy","description":"Deploy the service.","input_schema":{"type":"object","properties":{"env":{"type":"string"}},"required":["env"]},"output_schema":null,"groups":["ops"],"read_only":false,"concurrency_safe":true,"idempotent":false,"external":false,"state_injected":false,"timeout_ms":300000,"max_attempts":1,"permission":"passthrough","rule_matcher":"none","rule_field":"","mcp":{"server":"fs","tool":"read.file"}}`,
		`{"name":"x","input_schema":{"type":"object"},"timeout_ms":"5"}`, `{"name":"x"}`, `{"name":"x","input_schema":null}`, `{"name":"x","input_schema":{},"mcp":{"server":"a","x":1}}`, `{"name":"x","input_schema":{},"timeout_ms":1.0e3}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, bus.DecodeToolDef)
		d, err := bus.DecodeToolDef(b)
		if err != nil {
			if !errors.Is(err, bus.ErrBadRequest) {
				t.Fatalf("refused with %v", err)
			}
			return
		}
		enc, _ := json.Marshal(d)
		d2, err := bus.DecodeToolDef(enc)
		if err != nil || !d.Equal(&d2) {
			t.Fatalf("re-decoded definition differs (%v): %s", err, enc)
		}
	})
}

func FuzzGroup(f *testing.F) {
	seeds(f, `{"name":"ops","description":"Deploy and roll back.","instructions":"Deploy to staging first.","scope":"meta","active_by_default":false,"activate_on_skill":"","skills":[]}`,
		`{"name":"g","tools":[]}`, `{"name":1}`, `{}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, bus.DecodeGroup)
		if g, err := bus.DecodeGroup(b); err == nil {
			enc, _ := json.Marshal(g)
			if g2, err := bus.DecodeGroup(enc); err != nil || !g.Equal(g2) {
				t.Fatalf("re-decoded group differs (%v): %s", err, enc)
			}
		}
	})
}

func FuzzToolsQueryData(f *testing.F) {
	seeds(f, `{"format":"openai","request":{"merge_mode":"external_only","external_tools":[]},"user":"alice"}`, `{"request":{"tools":[]}}`, `{"format":1}`)
	f.Fuzz(func(t *testing.T, b []byte) { fixedPoint(t, b, viaEvent[bus.ToolsQuery]) })
}

func FuzzExecResultData(f *testing.F) {
	seeds(f, `{"state":"success","output":[{"type":"text","text":"4°C, rain"}],"metadata":{"a":1},"state_patch":{"todos":null}}`,
		`{"state":"error","output":[{"type":"data","media_type":"x/y","url":"u","size":-1}]}`, `{"output":[{"type":"text","text":"\u0000\ud800"}]}`, `{"output":{}}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, viaEvent[bus.ExecResult])
		fixedPoint(t, b, viaEvent[bus.Result])
		fixedPoint(t, b, viaEvent[bus.Cancel])
		fixedPoint(t, b, viaEvent[bus.ExecRequest])
	})
}

// FuzzBinaryHeaders: an event in binary mode (ce- headers, the body as
// data) never panics the decoder; one that decodes encodes in binary mode
// again to the same event, and in structured mode to the same event.
func FuzzBinaryHeaders(f *testing.F) {
	f.Add("1.0", "x%20y", "ce-sessionid", "s1", "CE-ReplyID", "r%2F1", "application/json", []byte(`{"calls":[]}`))
	f.Add("1.0", "x", "ce-time", "2026-12-01T10:00:00Z", "ce-expirytime", "bad", "", []byte(``))
	f.Add("1.0", "%zz", "ce-datacontenttype", "text/plain", "content-type", "application/cloudevents+json", "text/json", []byte(`null`))
	f.Add("1.0", "x", "Ce-Id", "y", "ce-id", "z", "", []byte(` 1 `))
	f.Add("1.0", "x", "CE-SESSIONID", "a", "ce-sessionid", "b", "", []byte(`{}`))
	f.Fuzz(func(t *testing.T, spec, id, k1, v1, k2, v2, ct string, body []byte) {
		h := nats.Header{"ce-specversion": {spec}, "ce-id": {id}, "ce-source": {"src"}, "ce-type": {"t"}}
		h[k1] = append(h[k1], v1)
		h[k2] = append(h[k2], v2)
		if ct != "" {
			h["content-type"] = []string{ct}
		}
		e, err := bus.Decode(&nats.Msg{Header: h, Data: body})
		if err != nil {
			if !errors.Is(err, bus.ErrBadEvent) {
				t.Fatalf("non bad_event error %v", err)
			}
			return
		}
		for range 3 { // header maps iterate in random order: the result may not depend on it
			again, err := bus.Decode(&nats.Msg{Header: h, Data: body})
			if err != nil || jsonOf(t, again) != jsonOf(t, e) {
				t.Fatalf("the same message decodes differently: %+v, then %+v (%v)", e, again, err)
			}
		}
		bm := bus.BinaryMsg("", e)
		h2, body2 := bm.Header, bm.Data
		e2, err := bus.Decode(&nats.Msg{Header: h2, Data: body2})
		if err != nil {
			t.Fatalf("binary re-decode of %+v: %v", e, err)
		}
		// Binary mode always sends a content type: an event without
		// datacontenttype comes back with application/json, the type the
		// CloudEvents JSON format implies when it is absent.
		implied := *e
		if implied.DataContentType == "" {
			implied.DataContentType = bus.ContentTypeJSON
		}
		if a, b := jsonOf(t, &implied), jsonOf(t, e2); a != b {
			t.Fatalf("binary round trip differs:\n%s\n%s", a, b)
		}
		enc, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		e3, err := bus.Decode(&nats.Msg{Data: enc})
		if err != nil {
			t.Fatalf("structured re-decode of %s: %v", enc, err)
		}
		if e3.ID != e.ID || e3.SessionID != e.SessionID || e3.ReplyID != e.ReplyID || e3.Time != e.Time || e3.DataContentType != e.DataContentType {
			t.Fatalf("structured round trip differs:\n%+v\n%+v", e, e3)
		}
	})
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBinaryDuplicateAttributes: found by FuzzBinaryHeaders. Two header
// names that differ in case only (or content-type and ce-datacontenttype)
// with different values once decoded to whichever the header map gave
// first; they are bad_event now, and equal values are accepted.
func TestBinaryDuplicateAttributes(t *testing.T) {
	base := func() nats.Header {
		return nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"x"}, "ce-source": {"src"}, "ce-type": {"t"}}
	}
	h := base()
	h["Ce-Id"] = []string{"y"}
	if _, err := bus.Decode(&nats.Msg{Header: h}); !errors.Is(err, bus.ErrBadEvent) {
		t.Errorf("ce-id and Ce-Id differ: %v", err)
	}
	h = base()
	h["content-type"], h["ce-datacontenttype"] = []string{"application/json"}, []string{"text/json"}
	if _, err := bus.Decode(&nats.Msg{Header: h}); !errors.Is(err, bus.ErrBadEvent) {
		t.Errorf("content-type and ce-datacontenttype differ: %v", err)
	}
	h = base()
	h["CE-ID"] = []string{"x"}
	if e, err := bus.Decode(&nats.Msg{Header: h}); err != nil || e.ID != "x" {
		t.Errorf("equal duplicates: %v", err)
	}
}
