package bus

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzDecodeBinaryExact holds decodeBinary's exact-name path (exactHeader,
// plainValue) to its general one: the same headers with each exact name
// spelt with a capital first letter take the general path for every
// header, and must decode to the same event, or fail both.
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
		general := nats.Header{}
		for k, vs := range h {
			if _, plain := exactHeader(k); plain {
				k = "C" + k[1:]
				if _, taken := h[k]; taken {
					t.Skip("the capitalised name is taken")
				}
			}
			general[k] = vs
		}
		body := []byte(`{"a":1}`)
		var a, b Event
		errA := decodeBinary(h, body, &a, true)
		errB := decodeBinary(general, body, &b, true)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("%v: %v, through the general path %v", h, errA, errB)
		}
		if errA != nil {
			return
		}
		ja, _ := json.Marshal(&a)
		jb, _ := json.Marshal(&b)
		if string(ja) != string(jb) {
			t.Fatalf("%v decodes differently:\nexact   %s\ngeneral %s", h, ja, jb)
		}
	})
}

// TestHeaderValueTable: the table gives each byte the class the
// comparisons it replaced gave it.
func TestHeaderValueTable(t *testing.T) {
	for c := range 256 {
		want := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '~'
		if (unescaped[c] == 1) != want {
			t.Errorf("byte %#x: unescaped %v, want %v", c, unescaped[c], want)
		}
	}
	for _, v := range []string{"", "toolbus/worker/w1", "a b", "k=v,l=w", "é", "100%",
		"toolbus/worker w1", "toolbus%worker/w1", "2026-12-06T13:09:41.430244095Z", "0123456789abcdeé"} {
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
// as a router sends it and nats.go hands it over ("exact"), and of the same
// header with its names capitalised ("general": the path every header took
// before exactHeader).
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
	general := nats.Header{} // the same names capitalised: the general path
	for k, vs := range h {
		general["C"+k[1:]] = vs
	}
	for _, c := range []struct {
		name string
		h    nats.Header
	}{{"exact", h}, {"general", general}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var out Event
			for b.Loop() {
				if err := decodeBinary(c.h, e.Data, &out, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
