package bus

import (
	"cmp"
	"net/url"
	"sync"

	"github.com/nats-io/nats.go"
)

// BinaryMsg returns a NATS message to subject carrying e in binary mode
// (docs/protocol.md 1): attributes in ce- headers, the data as body.
func BinaryMsg(subject string, e *Event) *nats.Msg {
	vals := binaryAttrs(e)
	return headerMsg(subject, e.Data, binaryKeys[:], vals[:])
}

// CompactMsg is BinaryMsg in the compact form (docs/protocol.md 5.1).
func CompactMsg(subject string, e *Event) *nats.Msg {
	vals := compactAttrs(e)
	return headerMsg(subject, e.Data, compactKeys[:], vals[:])
}

// headerMsg is a message to subject with data and a header keys: vals.
func headerMsg(subject string, data []byte, keys, vals []string) *nats.Msg {
	h := make(nats.Header, 16)
	fillHeader(h, make([]string, len(keys)), keys, vals)
	return &nats.Msg{Subject: subject, Header: h, Data: data}
}

// binaryKeys are the binary mode's headers, in binaryAttrs' order.
var binaryKeys = [...]string{"ce-specversion", "ce-id", "ce-source", "ce-type", "ce-subject", "ce-time",
	"ce-sessionid", "ce-replyid", "ce-toolcallid", "ce-traceparent", "ce-tracestate", "ce-expirytime",
	HeaderContentType, HeaderTraceParent, HeaderTraceState}

// binaryAttrs returns each of binaryKeys' header value for e ("" for none).
func binaryAttrs(e *Event) (vals [len(binaryKeys)]string) {
	vals = [...]string{e.SpecVersion, e.ID, e.Source, e.Type, e.Subject, e.Time, e.SessionID, e.ReplyID,
		e.ToolCallID, e.TraceParent, e.TraceState, e.ExpiryTime, cmp.Or(e.DataContentType, ContentTypeJSON), "", ""}
	if e.TraceParent != "" {
		vals[13], vals[14] = e.TraceParent, e.TraceState
	}
	escapeAll(vals[:])
	return vals
}

// escapeAll makes each of vals a header value (headerValue).
func escapeAll(vals []string) {
	for i, v := range vals {
		vals[i] = headerValue(v)
	}
}

// headerValue is v as a ce- header value: url.PathEscape'd (which Decode
// reverses) unless it needs no escaping. The check takes eight bytes a
// step, their table entries and'ed (one branch a step), the last step
// the last eight bytes.
func headerValue(v string) string {
	if len(v) < 8 {
		for i := 0; i < len(v); i++ {
			if unescaped[v[i]] == 0 {
				return url.PathEscape(v)
			}
		}
		return v
	}
	for i := 0; i < len(v); i += 8 {
		w := v[min(i, len(v)-8):][:8]
		if unescaped[w[0]]&unescaped[w[1]]&unescaped[w[2]]&unescaped[w[3]]&
			unescaped[w[4]]&unescaped[w[5]]&unescaped[w[6]]&unescaped[w[7]] == 0 {
			return url.PathEscape(v)
		}
	}
	return v
}

// unescaped is 1 for the bytes a header value carries as they are.
var unescaped = func() (t [256]uint8) {
	for c := range 256 {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '~' {
			t[c] = 1
		}
	}
	return t
}()

// ExecForm is the form of an io.toolbus.exec and of its result
// (docs/protocol.md 5.1, 5.2).
type ExecForm uint8

const (
	ExecStructured ExecForm = iota // structured mode: every worker reads it
	ExecBinary                     // binary mode (1.2): workers that declare binary_exec
	ExecCompact                    // compact binary mode (1.16): workers that declare compact_exec as well
)

// compactKeys are the compact form's headers (docs/protocol.md 5.1), in
// compactAttrs' order; a worker's result sets only the first four.
var compactKeys = [...]string{"ce-specversion", "ce-id", "ce-source", "ce-type", "ce-sessionid", "ce-replyid",
	"ce-toolcallid", "ce-expirytime", "ce-traceparent", "ce-tracestate"}

// compactAttrs is binaryAttrs for compactKeys.
func compactAttrs(e *Event) (vals [len(compactKeys)]string) {
	vals = [...]string{e.SpecVersion, e.ID, e.Source, e.Type, e.SessionID, e.ReplyID, e.ToolCallID,
		e.ExpiryTime, e.TraceParent, e.TraceState}
	escapeAll(vals[:])
	return vals
}

// CompactForm reports whether a binary-mode message h whose event decoded
// as e came in the compact form: without datacontenttype.
func CompactForm(h nats.Header, e *Event) bool { return e.DataContentType == "" && IsBinary(h) }

// PublishBinary sends e on subject over nc in binary mode, in the compact
// form when compact is set.
func PublishBinary(nc *nats.Conn, subject string, e *Event, compact bool) error {
	var err error
	WithBinaryMsg(subject, e, compact, func(m *nats.Msg) { err = nc.PublishMsg(m) })
	return err
}

// binaryHeaders and compactHeaders are the headerBufs of WithBinaryMsg,
// one pool per form, so that each keeps its shape. A compact header (an
// exec's 8 keys, a result's 4) fits a small map of 8 slots, which nats.go
// walks twice per message; a hint of 16 made a table of 32 (session 26).
var (
	binaryHeaders = sync.Pool{New: func() any {
		return &headerBuf{h: make(nats.Header, 16), vals: make([]string, len(binaryKeys))}
	}}
	compactHeaders = sync.Pool{New: func() any {
		return &headerBuf{h: make(nats.Header, 8), vals: make([]string, len(compactKeys))}
	}}
)

// WithBinaryMsg calls send with e on subject in binary mode (the compact
// form when compact is set), in a message reused once send returns: send
// must not keep it (a JetStream publish does).
func WithBinaryMsg(subject string, e *Event, compact bool, send func(*nats.Msg)) {
	if compact {
		vals := compactAttrs(e)
		withHeader(&compactHeaders, compactKeys[:], vals[:], subject, e.Data, send)
		return
	}
	vals := binaryAttrs(e)
	withHeader(&binaryHeaders, binaryKeys[:], vals[:], subject, e.Data, send)
}

// withHeader calls send with data on subject under a pooled header keys: vals.
func withHeader(pool *sync.Pool, keys, vals []string, subject string, data []byte, send func(*nats.Msg)) {
	b := pool.Get().(*headerBuf)
	b.fill(keys, vals)
	b.m = nats.Msg{Subject: subject, Header: b.h, Data: data}
	send(&b.m)
	b.done()
	pool.Put(b)
}
