package bus

import (
	"net/url"
	"sync"

	"github.com/nats-io/nats.go"
)

// BinaryMsg returns a NATS message to subject carrying e in binary mode
// (docs/protocol.md 1): attributes in ce- headers, percent-encoded where
// needed, the data as body, trace context as in structured mode.
func BinaryMsg(subject string, e *Event) *nats.Msg {
	h := make(nats.Header, 16)
	vals := binaryAttrs(e)
	fillHeader(h, make([]string, len(binaryKeys)), binaryKeys[:], vals[:])
	return &nats.Msg{Subject: subject, Header: h, Data: e.Data}
}

// binaryKeys are the binary mode's headers, in the order binaryAttrs gives
// their values.
var binaryKeys = [...]string{"ce-specversion", "ce-id", "ce-source", "ce-type", "ce-subject", "ce-time",
	"ce-sessionid", "ce-replyid", "ce-toolcallid", "ce-traceparent", "ce-tracestate", "ce-expirytime",
	HeaderContentType, HeaderTraceParent, HeaderTraceState}

// binaryAttrs returns the value of each of binaryKeys for e, as a header
// value (headerValue), "" for a header it does not get.
func binaryAttrs(e *Event) (vals [len(binaryKeys)]string) {
	ct := e.DataContentType
	if ct == "" {
		ct = ContentTypeJSON
	}
	vals = [...]string{e.SpecVersion, e.ID, e.Source, e.Type, e.Subject, e.Time, e.SessionID, e.ReplyID,
		e.ToolCallID, e.TraceParent, e.TraceState, e.ExpiryTime, ct, "", ""}
	if e.TraceParent != "" {
		vals[13], vals[14] = e.TraceParent, e.TraceState
	}
	for i, v := range vals {
		vals[i] = headerValue(v)
	}
	return vals
}

// headerValue is v as a ce- header value: unchanged when it holds only
// characters that need no percent-encoding (identifiers, times, most
// sources), else url.PathEscape'd, which Decode reverses.
func headerValue(v string) string {
	for i := 0; i < len(v); i++ {
		if !unescaped[v[i]] {
			return url.PathEscape(v)
		}
	}
	return v
}

// unescaped are the bytes a header value carries as they are (headerValue):
// one load per byte, where the comparisons were up to eleven.
var unescaped = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '~'
	}
	return t
}()

// PublishBinary sends e on subject in binary mode.
func PublishBinary(p Publisher, subject string, e *Event) error {
	nc, ok := p.(*nats.Conn)
	if !ok {
		return p.PublishMsg(BinaryMsg(subject, e))
	}
	var err error
	WithBinaryMsg(subject, e, func(m *nats.Msg) { err = nc.PublishMsg(m) })
	return err
}

// binaryHeaders are the headerBufs of messages nats.go writes out before
// its send returns (a core publish or request).
var binaryHeaders = sync.Pool{New: func() any {
	return &headerBuf{h: make(nats.Header, 16), vals: make([]string, len(binaryKeys))}
}}

// WithBinaryMsg calls send with e on subject in binary mode, in a message
// reused once send returns: send must not keep it (a JetStream publish does).
func WithBinaryMsg(subject string, e *Event, send func(*nats.Msg)) {
	b := binaryHeaders.Get().(*headerBuf)
	vals := binaryAttrs(e)
	b.fill(binaryKeys[:], vals[:])
	b.m = nats.Msg{Subject: subject, Header: b.h, Data: e.Data}
	send(&b.m)
	b.done()
	binaryHeaders.Put(b)
}
