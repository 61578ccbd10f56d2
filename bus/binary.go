package bus

import (
	"net/url"
	"sync"

	"github.com/nats-io/nats.go"
)

// IsBinary reports whether a message carries its event in CloudEvents
// binary mode (ce- headers), as Decode reads it.
func IsBinary(h nats.Header) bool { return isBinary(h) }

// BinaryMsg returns a NATS message to subject carrying e in binary mode
// (docs/protocol.md 1): every attribute in a ce- header, percent-encoded
// only where a value needs it, content-type datacontenttype, the body the
// data. Trace context is copied into traceparent and tracestate headers
// as in structured mode. The header is the message's own.
func BinaryMsg(subject string, e *Event) *nats.Msg {
	h := make(nats.Header, 16)
	binaryHeader(e, h, make([]string, 0, 16))
	return &nats.Msg{Subject: subject, Header: h, Data: e.Data}
}

// binaryHeader sets e's binary-mode header in h, with vals as the one
// backing array of every header's value.
func binaryHeader(e *Event, h nats.Header, vals []string) {
	set := func(k, v string) {
		if v != "" {
			vals = append(vals, headerValue(v))
			h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	set("ce-specversion", e.SpecVersion)
	set("ce-id", e.ID)
	set("ce-source", e.Source)
	set("ce-type", e.Type)
	set("ce-subject", e.Subject)
	set("ce-time", e.Time)
	set("ce-sessionid", e.SessionID)
	set("ce-replyid", e.ReplyID)
	set("ce-toolcallid", e.ToolCallID)
	set("ce-traceparent", e.TraceParent)
	set("ce-tracestate", e.TraceState)
	set("ce-expirytime", e.ExpiryTime)
	ct := e.DataContentType
	if ct == "" {
		ct = ContentTypeJSON
	}
	set(HeaderContentType, ct)
	if e.TraceParent != "" {
		set(HeaderTraceParent, e.TraceParent)
		set(HeaderTraceState, e.TraceState)
	}
}

// headerValue is v as a ce- header value: unchanged when it holds only
// characters that need no percent-encoding (identifiers, times, most
// sources), else url.PathEscape'd, which Decode reverses.
func headerValue(v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '~') {
			return url.PathEscape(v)
		}
	}
	return v
}

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

// binaryHeaders are header maps and value arrays for messages nats.go
// writes out before its send returns (a core publish or request): used
// once sent, they serve the next message.
var binaryHeaders = sync.Pool{New: func() any {
	return &headerBuf{h: make(nats.Header, 16), vals: make([]string, 0, 16)}
}}

type headerBuf struct {
	h    nats.Header
	vals []string
	m    nats.Msg
}

// WithBinaryMsg calls send with e on subject in binary mode, in a
// message whose header (and the message itself) is reused once send returns: send must not keep
// the message (a core publish or request keeps nothing of it; a
// JetStream publish, which may send it again, does).
func WithBinaryMsg(subject string, e *Event, send func(*nats.Msg)) {
	b := binaryHeaders.Get().(*headerBuf)
	binaryHeader(e, b.h, b.vals[:0])
	b.m = nats.Msg{Subject: subject, Header: b.h, Data: e.Data}
	send(&b.m)
	b.m = nats.Msg{}
	clear(b.h)
	clear(b.vals[:cap(b.vals)])
	binaryHeaders.Put(b)
}
