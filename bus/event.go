package bus

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	fastjson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
)

// Event is one CloudEvent 1.0 with the extension attributes toolbus uses.
// Data holds the JSON data as it is on the wire.
type Event struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject,omitempty"`
	DataContentType string          `json:"datacontenttype,omitempty"`
	Time            string          `json:"time,omitempty"`
	SessionID       string          `json:"sessionid,omitempty"`
	ReplyID         string          `json:"replyid,omitempty"`
	ToolCallID      string          `json:"toolcallid,omitempty"`
	TraceParent     string          `json:"traceparent,omitempty"`
	TraceState      string          `json:"tracestate,omitempty"`
	ExpiryTime      string          `json:"expirytime,omitempty"`
	Data            json.RawMessage `json:"data,omitempty"`
	DataBase64      string          `json:"data_base64,omitempty"`
}

// NewEvent returns an event of type typ from source with a fresh id, the
// current time and data marshalled as JSON (data may be a json.RawMessage).
func NewEvent(typ, source string, data any) (*Event, error) {
	e := Head(typ, source)
	if err := e.SetData(data); err != nil {
		return nil, err
	}
	return &e, nil
}

// Head is NewEvent without data, by value: an event that is sent and let
// go then stays off the heap.
func Head(typ, source string) Event {
	id, at := stamp()
	return Event{SpecVersion: SpecVersion, ID: id, Source: source, Type: typ,
		DataContentType: ContentTypeJSON, Time: at}
}

// timeLayout is the layout of the time attribute: RFC 3339, milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// SetData marshals v as the event's data.
func (e *Event) SetData(v any) error {
	switch d := v.(type) {
	case nil:
		e.Data = nil
	case json.RawMessage:
		e.Data = d
	default:
		b, err := fastjson.Marshal(v)
		if err != nil {
			return fmt.Errorf("bus: marshal %s data: %w", e.Type, err)
		}
		e.Data = b
	}
	return nil
}

// DataAs decodes the event's data into v. A decoding error is a bad_event
// *Error naming the event type.
func (e *Event) DataAs(v any) error {
	if len(e.Data) == 0 {
		return Errorf(CodeBadEvent, "%s: data is missing", e.Type)
	}
	if err := fastjson.Unmarshal(e.Data, v); err != nil {
		if be, ok := errors.AsType[*Error](err); ok { // from a strict decoder (strict.go): it names the member
			return be
		}
		return Errorf(CodeBadEvent, "%s: data: %v", e.Type, err)
	}
	return nil
}

// Expiry returns the parsed expirytime, or the zero time when absent.
func (e *Event) Expiry() (time.Time, error) {
	if e.ExpiryTime == "" {
		return time.Time{}, nil
	}
	t, err := parseTime(e.ExpiryTime)
	if err != nil {
		return time.Time{}, Errorf(CodeBadEvent, "expirytime %q is not RFC 3339", e.ExpiryTime)
	}
	return t, nil
}

// Validate checks the required context attributes and the identifier
// extensions that are present. It returns a bad_event *Error.
func (e *Event) Validate() error {
	switch {
	case e.SpecVersion != SpecVersion:
		return Errorf(CodeBadEvent, "specversion must be %q, got %q", SpecVersion, e.SpecVersion)
	case e.ID == "":
		return Errorf(CodeBadEvent, "id is empty")
	case e.Source == "":
		return Errorf(CodeBadEvent, "source is empty")
	case e.Type == "":
		return Errorf(CodeBadEvent, "type is empty")
	case e.DataContentType != "" && !isJSONContentType(e.DataContentType):
		return Errorf(CodeBadEvent, "datacontenttype must be application/json, got %q", e.DataContentType)
	}
	for i, v := range [...]string{e.SessionID, e.ReplyID, e.ToolCallID} {
		if v != "" && !ValidID(v) {
			return Errorf(CodeBadEvent, "%s %q must match ^[A-Za-z0-9_-]{1,128}$", attrNames[slotSession+i], v)
		}
	}
	if e.Time != "" && !validTime(e.Time) {
		return Errorf(CodeBadEvent, "time %q is not RFC 3339", e.Time)
	}
	if e.ExpiryTime != "" && !validTime(e.ExpiryTime) {
		return Errorf(CodeBadEvent, "expirytime %q is not RFC 3339", e.ExpiryTime)
	}
	return nil
}

func isJSONContentType(ct string) bool {
	if ct == ContentTypeJSON { // the usual one, without lowering a copy
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == ContentTypeJSON || strings.HasSuffix(mt, "+json") || mt == "text/json"
}

// Encode returns the event in structured JSON mode, written by hand (the
// router encodes several events per call); Data must hold valid JSON, which
// a fast scan checks.
func (e *Event) Encode() ([]byte, error) {
	if len(e.Data) > 0 && !fastjson.Valid(e.Data) {
		return nil, fmt.Errorf("bus: encode %s: data is not valid JSON", e.Type)
	}
	return e.appendJSON(make([]byte, 0, e.encodedSize())), nil
}

// encodedSize is the length of e's encoding when no attribute needs
// escaping (names, quotes and commas: at most 224 bytes).
func (e *Event) encodedSize() int {
	n := 224 + len(e.Data) + len(e.DataBase64)
	for _, a := range e.attrs() {
		n += len(*a)
	}
	return n
}

// appendJSON appends the event in structured JSON mode to b: specversion,
// id, source and type always, every other attribute when set, data last.
func (e *Event) appendJSON(b []byte) []byte {
	b = appendField(b, `{"specversion":`, e.SpecVersion)
	b = appendField(b, `,"id":`, e.ID)
	b = appendField(b, `,"source":`, e.Source)
	b = appendField(b, `,"type":`, e.Type)
	b = appendAttr(b, `,"subject":`, e.Subject)
	b = appendAttr(b, `,"datacontenttype":`, e.DataContentType)
	b = appendAttr(b, `,"time":`, e.Time)
	b = appendAttr(b, `,"sessionid":`, e.SessionID)
	b = appendAttr(b, `,"replyid":`, e.ReplyID)
	b = appendAttr(b, `,"toolcallid":`, e.ToolCallID)
	b = appendAttr(b, `,"traceparent":`, e.TraceParent)
	b = appendAttr(b, `,"tracestate":`, e.TraceState)
	b = appendAttr(b, `,"expirytime":`, e.ExpiryTime)
	b = appendAttr(b, `,"data_base64":`, e.DataBase64)
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, e.Data...)
	}
	return append(b, '}')
}

// appendAttr appends key and the JSON string v when v is set.
func appendAttr(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendField(b, key, v)
}

// appendField appends key (punctuation and name) and the JSON string v.
func appendField(b []byte, key, v string) []byte { return appendString(append(b, key...), v) }

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := plainRun(s); i < len(s); i += plainRun(s[i:]) {
		c := s[i]
		if c == 0x7f { // DEL goes as it is
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = appendU(b, rune(c))
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Msg returns a NATS message to subject carrying the event in structured
// mode, with the content-type header and the trace headers set. The message
// has its own header, which the caller (or jetstream.PublishMsg) may modify.
func (e *Event) Msg(subject string) (*nats.Msg, error) {
	return e.msg(subject, "", false)
}

// StoredMsg is Msg with the Nats-Msg-Id header set to e's id, for a
// stream that stores the event once however often it is published
// (store.Publisher sets the same header, and finds it set).
func (e *Event) StoredMsg(subject string) (*nats.Msg, error) {
	return e.msg(subject, e.ID, false)
}

// msg is Msg with msgID, when set, as Nats-Msg-Id. With shared (this
// package's senders, which never modify a header), an event without trace
// context or msgID gets the read-only plainHeader instead of a map.
func (e *Event) msg(subject, msgID string, shared bool) (*nats.Msg, error) {
	b, err := e.Encode()
	if err != nil {
		return nil, err
	}
	if shared && msgID == "" && e.TraceParent == "" {
		return &nats.Msg{Subject: subject, Header: plainHeader, Data: b}, nil
	}
	s := &struct {
		m    nats.Msg
		vals [len(eventKeys)]string
	}{m: nats.Msg{Subject: subject, Header: make(nats.Header, 4), Data: b}}
	vals := e.eventHeader(msgID)
	fillHeader(s.m.Header, s.vals[:], eventKeys[:], vals[:])
	return &s.m, nil
}

// eventKeys are the headers of a structured event's message, in eventHeader's order.
var eventKeys = [...]string{HeaderContentType, natsMsgID, HeaderTraceParent, HeaderTraceState}

// eventHeader is the value of each of eventKeys for e sent with msgID, ""
// for a header it does not get (tracestate goes only with traceparent).
// Trace context that is not printable ASCII stays in the JSON only: some
// clients (jnats) refuse such a header value and then read nothing more.
func (e *Event) eventHeader(msgID string) [len(eventKeys)]string {
	tp, ts := e.TraceParent, e.TraceState
	if !printable(tp) || !printable(ts) {
		tp = ""
	}
	if tp == "" {
		ts = ""
	}
	return [...]string{ContentTypeEvent, msgID, tp, ts}
}

// printable reports whether s is printable ASCII, as a header value must be
// (ADR-4).
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// headerBuf is a pooled message and its header, each value a one-string
// slice of vals; a header of the previous one's shape (the same keys set)
// keeps its keys, and only its values are written.
type headerBuf struct {
	m     nats.Msg
	h     nats.Header
	vals  []string
	shape uint16 // which keys h holds; 0: none
}

// fill sets h to keys[i]: vals[i] for each value that is set.
func (hb *headerBuf) fill(keys, vals []string) {
	var shape uint16
	for i, v := range vals {
		if v != "" {
			shape |= 1 << i
		}
	}
	if shape == hb.shape {
		keys = nil // h has these keys: only the values change
	} else {
		clear(hb.h)
		hb.shape = shape
	}
	fillHeader(hb.h, hb.vals, keys, vals)
}

// fillHeader writes each value of vals that is set into store, in order,
// and, unless keys is nil (h has them already), sets h[keys[i]] to its
// one-string slice of store.
func fillHeader(h nats.Header, store, keys, vals []string) {
	n := 0
	for i, v := range vals {
		if v != "" {
			store[n] = v
			if keys != nil {
				h[keys[i]] = store[n : n+1 : n+1]
			}
			n++
		}
	}
}

// done lets go of hb's message and header values once it is sent.
func (hb *headerBuf) done() {
	hb.m = nats.Msg{}
	clear(hb.vals)
}

// SendWith publishes e on subject through send (structured mode, Data
// checked as Encode does), with msgID, when set, as its Nats-Msg-Id, so a
// stream stores it once. Encoding, message and header are pooled (five
// allocations fewer than NewEvent, Msg and PublishMsg): send may set the
// reply subject but must not keep the message after it returns (a core
// publish keeps nothing of it).
func SendWith(subject string, e *Event, msgID string, send func(*nats.Msg) error) error {
	if len(e.Data) > 0 && !fastjson.Valid(e.Data) {
		return fmt.Errorf("bus: encode %s: data is not valid JSON", e.Type)
	}
	return SendTrusted(subject, e, msgID, send)
}

// SendTrusted is SendWith for an event whose data its caller made itself
// (an AppendJSON's, a marshalled value's) and so knows to be JSON: the
// data is not scanned again. Data that is not JSON goes out as it is.
func SendTrusted(subject string, e *Event, msgID string, send func(*nats.Msg) error) error {
	s := sends.Get().(*sendBuf)
	s.b = e.appendJSON(s.b[:0])
	h := plainHeader
	if e.TraceParent != "" || msgID != "" {
		vals := e.eventHeader(msgID)
		s.fill(eventKeys[:], vals[:])
		h = s.h
	}
	s.m = nats.Msg{Subject: subject, Header: h, Data: s.b}
	err := send(&s.m)
	s.done()
	if cap(s.b) <= maxPooledSend {
		sends.Put(s)
	}
	return err
}

// sendBuf is SendTrusted's headerBuf with its encoding.
type sendBuf struct {
	headerBuf
	b []byte
}

// natsMsgID is JetStream's deduplication header (jetstream.MsgIDHeader).
const natsMsgID = "Nats-Msg-Id"

// maxPooledSend bounds the encodings kept for reuse.
const maxPooledSend = 64 << 10

var sends = sync.Pool{New: func() any {
	return &sendBuf{b: make([]byte, 0, 1024), headerBuf: headerBuf{h: make(nats.Header, 4), vals: make([]string, len(eventKeys))}}
}}

// plainHeader is the header of every event without trace context that this
// package sends itself (nats.Conn only reads it); it must never reach code
// that writes headers, such as jetstream.PublishMsg.
var plainHeader = nats.Header{HeaderContentType: {ContentTypeEvent}}

// Decode reads the event of a NATS message in structured or binary mode and
// validates it. Errors are bad_event *Errors with a readable message.
func Decode(m *nats.Msg) (*Event, error) {
	e := new(Event)
	if err := DecodeTo(m, e); err != nil {
		return nil, err
	}
	return e, nil
}

// DecodeTo is Decode into e, which it overwrites, so that an event read and
// let go can stay off the heap.
func DecodeTo(m *nats.Msg, e *Event) error {
	*e = Event{}
	if IsBinary(m.Header) {
		return decodeBinary(m.Header, m.Data, e, true)
	}
	if err := decodeStructured(m.Data, e); err != nil {
		*e = Event{}
		return err
	}
	return nil
}

// DecodeHead is DecodeTo for a caller that owns m's data and decodes the
// event's data next with a checking decoder (DataAs, FromEvent): the data is
// not checked here, and may be a slice of m.Data.
func DecodeHead(m *nats.Msg, e *Event) error {
	_, err := decodeHead(m, e, false, flatData{})
	return err
}

// decodeHead is DecodeHead, DecodeReplyView with view; flat reports that
// the plain form was read, and so that data's reader, when given, was
// offered the data member first (decodeFlatData).
func decodeHead(m *nats.Msg, e *Event, view bool, data flatData) (flat bool, err error) {
	*e = Event{}
	if IsBinary(m.Header) {
		return false, decodeBinary(m.Header, m.Data, e, false)
	}
	b := m.Data
	if len(b) == 0 || b[0] != '{' || b[len(b)-1] != '}' { // else TrimSpace has nothing to trim
		b = bytes.TrimSpace(b)
	}
	if len(b) > 0 && b[0] == '{' && decodeFlatData(b, e, false, view, data) {
		return true, e.Validate()
	}
	return false, DecodeTo(m, e)
}

// decodeStructured reads and validates an event in structured JSON mode
// into e, which is zero.
func decodeStructured(b []byte, e *Event) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return Errorf(CodeBadEvent, "message is not a JSON CloudEvent")
	}
	if decodeFlat(b, e) {
		return e.Validate()
	}
	d := new(Event) // not e: what the general decoder reads into escapes
	if err := fastjson.Unmarshal(b, d); err != nil {
		*e = Event{}
		return Errorf(CodeBadEvent, "message is not a CloudEvent: %v", err)
	}
	*e = *d
	if e.DataBase64 != "" {
		if len(e.Data) > 0 {
			return Errorf(CodeBadEvent, "data and data_base64 are both set")
		}
		d, err := base64.StdEncoding.DecodeString(e.DataBase64)
		if err != nil {
			return Errorf(CodeBadEvent, "data_base64: %v", err)
		}
		if !json.Valid(d) {
			return Errorf(CodeBadEvent, "data_base64 does not hold JSON (datacontenttype must be JSON)")
		}
		e.Data, e.DataBase64 = d, ""
	}
	if isNull(e.Data) {
		e.Data = nil
	}
	return e.Validate()
}

// decodeFlat reads b, a structured event, when it has the plain form
// toolbus's senders write (known attributes once, printable ASCII strings
// without escapes, object or array data), in one allocation; else it
// reports false and the general decoder judges (FuzzDecodeFlat).
func decodeFlat(b []byte, e *Event) bool { return decodeFlatData(b, e, true, false, flatData{}) }

// decodeFlatData is decodeFlat; with check false, data is neither checked
// to be JSON nor copied: e.Data is a slice of b (DecodeHead); with view,
// the attributes are strings over b's bytes (DecodeReplyView); data's
// reader, when given, reads the data member first, and what it takes is
// e.Data (DecodeReplyView, DecodeBatch).
func decodeFlatData(b []byte, e *Event, check, view bool, data flatData) bool {
	attrs := e.attrs()
	var vals [nAttrs][]byte // the attributes that are not constants, in b
	n := 0
	p := flatParser{b: b, unchecked: !check}
	seen, ok := p.object(func(key []byte) uint16 {
		slot := attrSlot(unsafe.String(unsafe.SliceData(key), len(key))) // a view: attrSlot keeps nothing
		if slot < 0 {
			return 0
		}
		if slot == slotData {
			v, ok := dataMember(&p, data)
			if !ok {
				return 0
			}
			e.Data = v
			if check {
				e.Data = append(json.RawMessage(nil), v...)
			}
		} else if v, ok := p.plain(); !ok {
			return 0
		} else if c, ok := knownValue(v, knownValues[slot]); ok {
			*attrs[slot] = c
		} else {
			vals[slot] = v
			n += len(v)
		}
		return 1 << slot
	})
	if !ok || seen == 0 || !p.end() {
		return false
	}
	if view {
		for slot, v := range vals {
			if v != nil {
				*attrs[slot] = unsafe.String(unsafe.SliceData(v), len(v))
			}
		}
		return true
	}
	setStrings(attrs, &vals, n)
	return true
}

// dataMember reads the data member's value: what data's reader takes,
// checked as FromEvent checks it, else an object or array (raw).
func dataMember(p *flatParser, data flatData) ([]byte, bool) {
	p.skip()
	start, unchecked := p.i, p.unchecked
	p.unchecked = false
	read := data.reply != nil && data.reply.read(p) || data.batch != nil && data.batch.read(p)
	if p.unchecked = unchecked; read {
		return p.b[start:p.i:p.i], true
	}
	p.i = start
	return p.raw("{[")
}

// flatData is the reader of an event's data in the pass that reads its
// attributes: a reply's or a batch's, whichever is set (a struct, not an
// interface, so that neither leaves its caller's stack).
type flatData struct {
	reply *flatReply
	batch *flatBatch
}

// setStrings sets each attribute of vals that is set, as slices of one new string.
func setStrings(attrs [nAttrs]*string, vals *[nAttrs][]byte, n int) {
	var all strings.Builder
	all.Grow(n)
	for slot, v := range vals {
		if v != nil {
			*attrs[slot] = addString(&all, v)
		}
	}
}

// The attributes the decoders read, by slot: the strings, then data.
const (
	slotSpec = iota
	slotID
	slotSource
	slotType
	slotSubject
	slotContentType
	slotTime
	slotSession
	slotReply
	slotToolCall
	slotTraceParent
	slotTraceState
	slotExpiry
	slotData
	nAttrs = slotData
)

// attrs points at e's attributes, by slot.
func (e *Event) attrs() [nAttrs]*string {
	return [nAttrs]*string{&e.SpecVersion, &e.ID, &e.Source, &e.Type, &e.Subject, &e.DataContentType, &e.Time,
		&e.SessionID, &e.ReplyID, &e.ToolCallID, &e.TraceParent, &e.TraceState, &e.ExpiryTime}
}

// attrSlot is the slot of the attribute named key, slotData for data, -1
// for any other name (a switch: it runs for every member of every event).
func attrSlot(key string) int {
	switch key {
	case "specversion":
		return slotSpec
	case "id":
		return slotID
	case "source":
		return slotSource
	case "type":
		return slotType
	case "subject":
		return slotSubject
	case "datacontenttype":
		return slotContentType
	case "time":
		return slotTime
	case "sessionid":
		return slotSession
	case "replyid":
		return slotReply
	case "toolcallid":
		return slotToolCall
	case "traceparent":
		return slotTraceParent
	case "tracestate":
		return slotTraceState
	case "expirytime":
		return slotExpiry
	case "data":
		return slotData
	}
	return -1
}

// knownValues are the constant values decodeFlat reads without an allocation.
var knownValues = [nAttrs][]string{
	slotSpec:        {SpecVersion},
	slotType:        {TypeCallBatch, TypeExecResult, TypeToolsQuery, TypeAnswer, TypeCallCancel, TypeRegister, TypeAdmin},
	slotContentType: {ContentTypeJSON},
}

// knownValue returns the one of consts that v spells.
func knownValue(v []byte, consts []string) (string, bool) {
	for _, c := range consts {
		if string(v) == c {
			return c, true
		}
	}
	return "", false
}

func isNull(b json.RawMessage) bool { return len(b) == 4 && string(b) == "null" }

// decodeBinary reads an event whose attributes are ce- headers (names
// case-insensitive, values percent-encoded) and whose body is the data;
// with check false the body is not checked to be JSON (DecodeHead).
func decodeBinary(h nats.Header, body []byte, e *Event, check bool) error {
	e.Data = body
	attrs := e.attrs()
	// Two headers may name one attribute (names are case-insensitive): with
	// different values that is bad_event, never a choice by map order. from
	// is each attribute's header; others keeps the other extensions.
	var from [nAttrs]string
	var others map[string][2]string // made at the first: toolbus's senders send none
	for k, vs := range h {
		if len(vs) > 1 && !sameValues(k, vs) {
			return Errorf(CodeBadEvent, "header %s is given twice with different values", k)
		}
		var name, v string
		slot, plain := exactHeader(k)
		if plain && len(vs) > 0 && plainValue(vs[0]) { // as binaryKeys spell it, ASCII, no escape
			name, v = attrNames[slot], vs[0]
		} else {
			slot = -1
			lk := strings.ToLower(k)
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
			if !utf8.ValidString(v) { // JSON would turn the bytes into U+FFFD
				return Errorf(CodeBadEvent, "header %s is not UTF-8", k)
			}
			slot = attrSlot(name)
		}
		var prev [2]string // the header that gave name before, and its value
		if i := slot; i >= 0 && i < nAttrs {
			if prev = [2]string{from[i], *attrs[i]}; prev[0] == "" {
				from[i], *attrs[i] = k, v
			}
		} else if prev = others[name]; prev[0] == "" {
			if others == nil {
				others = map[string][2]string{}
			}
			others[name] = [2]string{k, v}
		}
		if prev[0] != "" && prev[1] != v {
			a, b := min(prev[0], k), max(prev[0], k)
			return Errorf(CodeBadEvent, "attribute %s is given twice with different values, by headers %s and %s", name, a, b)
		}
	}
	if len(e.Data) == 0 || (e.Data[0] <= ' ' || e.Data[0] >= utf8.RuneSelf) && len(bytes.TrimSpace(e.Data)) == 0 { // JSON's first byte: nothing to trim
		e.Data = nil
	} else if check && !validJSON(e.Data) {
		return Errorf(CodeBadEvent, "binary-mode data is not JSON")
	}
	return e.Validate()
}

// exactHeader is the attribute slot of header k when k is named as
// binaryKeys spell it (plain true); else decodeBinary's general path reads it.
func exactHeader(k string) (slot int, plain bool) {
	if k == HeaderContentType {
		return slotContentType, true
	}
	name, ok := strings.CutPrefix(k, "ce-")
	if slot = attrSlot(name); !ok || slot < 0 || slot == slotData {
		return -1, false
	}
	return slot, true
}

// attrNames are the attributes' names by slot.
var attrNames = [nAttrs]string{slotSpec: "specversion", slotID: "id", slotSource: "source", slotType: "type",
	slotSubject: "subject", slotContentType: "datacontenttype", slotTime: "time", slotSession: "sessionid",
	slotReply: "replyid", slotToolCall: "toolcallid", slotTraceParent: "traceparent", slotTraceState: "tracestate",
	slotExpiry: "expirytime"}

// sameValues reports whether the values of header k, a line repeated
// (nats.go keeps each), say one thing: a ce- header's once percent-decoded.
func sameValues(k string, vs []string) bool {
	ce := len(k) > 3 && strings.EqualFold(k[:3], "ce-")
	for _, v := range vs[1:] {
		if v == vs[0] {
			continue
		}
		a, errA := url.PathUnescape(vs[0])
		b, errB := url.PathUnescape(v)
		if !ce || errA != nil || errB != nil || a != b {
			return false
		}
	}
	return true
}

// plainValue reports whether header value v is ASCII without '%', eight
// bytes a word, the last word the last eight bytes.
func plainValue(v string) bool {
	if len(v) < 8 {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c >= utf8.RuneSelf || c == '%' {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(v); i += 8 {
		w := word(v[min(i, len(v)-8):][:8])
		if pct := w ^ '%'*ones; (w|(pct-ones)&^pct)&(0x80*ones) != 0 {
			return false
		}
	}
	return true
}

// IsBinary reports whether a message carries its event in CloudEvents
// binary mode (ce- attributes), as Decode reads it: exact lookups first,
// a case-insensitive scan only when they tell nothing.
func IsBinary(h nats.Header) bool {
	switch len(h) {
	case 0:
		return false
	case 1:
		if _, ok := h[HeaderContentType]; ok {
			return false
		}
	}
	if _, ok := h["ce-specversion"]; ok {
		return true
	}
	if _, ok := h["ce-id"]; ok {
		return true
	}
	for k := range h {
		if len(k) > 3 && (k[0] == 'c' || k[0] == 'C') && (k[1] == 'e' || k[1] == 'E') && k[2] == '-' {
			return true
		}
	}
	return false
}
