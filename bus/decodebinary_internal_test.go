package bus

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// decodeBinaryBefore is decodeBinary as it was before its exact-name path
// (exactHeader, plainValue): every header lowered, cut and looked up. The
// fuzzer below holds the two to the same events and the same failures.
func decodeBinaryBefore(h nats.Header, body []byte, e *Event, check bool) error {
	e.Data = body
	attrs := e.attrs()
	// Header names are read case-insensitively, so two may name one
	// attribute: with different values that is bad_event, never a choice by
	// map order. from is each attribute's header; others keeps extensions
	// toolbus does not read, to compare.
	var from [nAttrs]string
	others := map[string][2]string{} // on the stack while it holds at most 8
	for k, vs := range h {
		lk := strings.ToLower(k)
		var name, v string
		if lk == HeaderContentType && len(vs) > 0 {
			name, v = "datacontenttype", vs[0]
		} else {
			var ok bool
			name, ok = strings.CutPrefix(lk, "ce-")
			if !ok || len(vs) == 0 {
				continue
			}
			var err error
			if v = vs[0]; strings.IndexByte(v, '%') >= 0 { // else PathUnescape returns it as it is
				v, err = url.PathUnescape(v)
			}
			if err != nil {
				return Errorf(CodeBadEvent, "header %s: %v", k, err)
			}
		}
		if !utf8.ValidString(v) {
			// CloudEvents attributes are Unicode strings; JSON would turn
			// the bytes into U+FFFD, so the event would change on the way.
			return Errorf(CodeBadEvent, "header %s is not UTF-8", k)
		}
		var prev [2]string // the header that gave name before, and its value
		if i := attrSlot(name); i >= 0 && i < nAttrs {
			if prev = [2]string{from[i], *attrs[i]}; prev[0] == "" {
				from[i], *attrs[i] = k, v
			}
		} else if prev = others[name]; prev[0] == "" {
			others[name] = [2]string{k, v}
		}
		if prev[0] != "" && prev[1] != v {
			a, b := min(prev[0], k), max(prev[0], k)
			return Errorf(CodeBadEvent, "attribute %s is given twice with different values, by headers %s and %s", name, a, b)
		}
	}
	if len(bytes.TrimSpace(e.Data)) == 0 {
		e.Data = nil
	} else if check && !json.Valid(e.Data) {
		return Errorf(CodeBadEvent, "binary-mode data is not JSON")
	}
	return e.Validate()
}

func FuzzDecodeBinaryExact(f *testing.F) {
	f.Add("ce-id", "x", "CE-ID", "x", "content-type", "application/json")
	f.Add("ce-id", "x", "Ce-Id", "y", "ce-datacontenttype", "text/plain")
	f.Add("ce-sessionid", "s%201", "ce-replyid", "r\xff", "content-type", "text/json")
	f.Add("ce-time", "2026-12-01T10:00:00Z", "ce-expirytime", "bad", "Content-Type", "a%zz")
	f.Add("ce-tracestate", "k=v,l=w", "ce-traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "ce-data", "{}")
	f.Add("ce-subject", "é", "ce-other", "1", "ce-datacontenttype", "application/json")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"i1"}, "ce-source": {"src"}, "ce-type": {"t"}}
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}} {
			h[kv[0]] = append(h[kv[0]], kv[1])
		}
		body := []byte(`{"a":1}`)
		var a, b Event
		errA := decodeBinary(h, body, &a, true)
		errB := decodeBinaryBefore(h, body, &b, true)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("%v: now %v, before %v", h, errA, errB)
		}
		if errA != nil {
			return
		}
		ja, _ := json.Marshal(&a)
		jb, _ := json.Marshal(&b)
		if string(ja) != string(jb) {
			t.Fatalf("%v decodes differently:\nnow    %s\nbefore %s", h, ja, jb)
		}
	})
}

// TestHeaderValueTable: the table gives each byte the class the
// comparisons it replaced gave it.
func TestHeaderValueTable(t *testing.T) {
	for c := range 256 {
		want := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '~'
		if unescaped[c] != want {
			t.Errorf("byte %#x: unescaped %v, want %v", c, unescaped[c], want)
		}
	}
	for _, v := range []string{"", "toolbus/worker/w1", "a b", "k=v,l=w", "é", "100%"} {
		want := v
		if strings.ContainsFunc(v, func(r rune) bool { return r > 127 || strings.ContainsRune(" =,%", r) }) {
			want = url.PathEscape(v)
		}
		if got := headerValue(v); got != want {
			t.Errorf("headerValue(%q) = %q, want %q", v, got, want)
		}
	}
}

// BenchmarkDecodeBinaryExec is decodeBinary of an exec request's header,
// as a router sends it and nats.go hands it over, now and before.
func BenchmarkDecodeBinaryExec(b *testing.B) {
	e := Head(TypeExec, "toolbus/router/r1")
	e.Data = []byte(`{"call":{"id":"c1","name":"echo","input":{"text":"hello"}},"user":null,"context":null,"attempt":1}`)
	e.SessionID, e.ReplyID, e.ToolCallID = "bench-session-0001", "M3CgXPmzZg1495hoVjoRqG", "c1"
	e.ExpiryTime = "2026-12-05T19:00:00.123456789Z"
	m := BinaryMsg("toolbus.exec.echo", &e)
	h := nats.Header{}
	for k, vs := range m.Header {
		h[k] = append([]string(nil), vs...)
	}
	for _, c := range []struct {
		name   string
		decode func(nats.Header, []byte, *Event, bool) error
	}{{"now", decodeBinary}, {"before", decodeBinaryBefore}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var out Event
			for b.Loop() {
				if err := c.decode(h, e.Data, &out, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
