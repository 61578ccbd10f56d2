// Package conformance is a black-box conformance suite for the toolbus wire
// protocol (docs/protocol.md, version 1). It talks to a router only as a foreign
// client would: raw NATS (core and JetStream) and encoding/json, CloudEvents
// built by hand in structured JSON mode. Tool workers, agents, external
// handlers and approval UIs are hand-written here too; nothing of the
// project's client, worker or bus packages is used on the protocol side.
// The only project code used is the setup: internal/testkit/xtest starts the
// in-process nats-server and routers (and nothing else: the suite waits
// for what it needs through the wire), and internal/testkit gives connections
// and bounded polling.
//
// Tests that show a deviation from docs/protocol.md live in discrepancy_test.go
// behind the build tag conformance_todo.
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
)

// bound is the generous limit for anything that should happen "soon" on a
// busy two-core machine under -race.
const bound = 10 * time.Second

// heartbeat is the routers' heartbeat in these tests; raw workers beat
// several times faster so that a slow scheduler never makes them look gone.
const (
	heartbeat       = 500 * time.Millisecond
	workerHeartbeat = 150 * time.Millisecond
)

// Wire constants, written from docs/protocol.md (not imported).
const (
	ctEvent = "application/cloudevents+json"
	ctJSON  = "application/json"

	tCallBatch   = "io.toolbus.call.batch"
	tCallReply   = "io.toolbus.call.reply"
	tToolsQuery  = "io.toolbus.tools.query"
	tToolsList   = "io.toolbus.tools.list"
	tCallCancel  = "io.toolbus.call.cancel"
	tCallResult  = "io.toolbus.call.result"
	tCallProg    = "io.toolbus.call.progress"
	tCallParked  = "io.toolbus.call.parked"
	tBatchDone   = "io.toolbus.batch.done"
	tExec        = "io.toolbus.exec"
	tExecResult  = "io.toolbus.exec.result"
	tExternalReq = "io.toolbus.external.request"
	tConfirmReq  = "io.toolbus.confirm.request"
	tAnswer      = "io.toolbus.answer"
	tAnswerAck   = "io.toolbus.answer.ack"
	tRegister    = "io.toolbus.register"
	tRegisterAck = "io.toolbus.register.ack"
	tAdmin       = "io.toolbus.admin"
	tAdminReply  = "io.toolbus.admin.reply"
	tError       = "io.toolbus.error"

	interruptedText = "<system-reminder>The tool call has been interrupted by the user.</system-reminder>"
	agentSource     = "conformance/agent"
)

// M is a JSON object under construction.
type M = map[string]any

var (
	idRE      = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	counter   atomic.Int64
	routerSrc = regexp.MustCompile(`^toolbus/router/[^/]+$`)
)

// nextID returns a fresh identifier valid as a CloudEvent id, reply id or call id.
func nextID(prefix string) string { return fmt.Sprintf("%s%d", prefix, counter.Add(1)) }

// ---------------------------------------------------------------------------
// The system under test

// sys is one deployment: an in-process nats-server, one or more routers, and
// the agent's own connection.
type sys struct {
	t   *testing.T
	d   *xtest.Deployment
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	p   string // subject prefix
	cfg routerOpts
}

// routerOpts are the few router settings the tests vary.
type routerOpts struct {
	prefix      string
	defaultMode string
	parkTTL     time.Duration
}

type option func(*routerOpts)

func withPrefix(p string) option         { return func(o *routerOpts) { o.prefix = p } }
func withDefaultMode(m string) option    { return func(o *routerOpts) { o.defaultMode = m } }
func withParkTTL(d time.Duration) option { return func(o *routerOpts) { o.parkTTL = d } }

// subj returns P.<parts...>.
func (s *sys) subj(parts ...string) string { return s.p + "." + strings.Join(parts, ".") }

// start runs a nats-server and one router.
func start(t *testing.T, opts ...option) *sys {
	t.Helper()
	s := &sys{t: t, p: "toolbus"}
	for _, o := range opts {
		o(&s.cfg)
	}
	if s.cfg.prefix != "" {
		s.p = s.cfg.prefix
	}
	s.d = xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: heartbeat, Bound: bound, Router: router.Config{
		Prefix: s.cfg.prefix, DefaultMode: s.cfg.defaultMode, ParkTTL: s.cfg.parkTTL}})
	s.srv = s.d.Server
	s.nc = testkit.Connect(t, s.srv)
	js := testkit.JetStream(t, s.nc)
	s.js = js
	return s
}

// addRouter starts one more router on its own connection. A router loads
// what is registered when it starts, and sees later registrations through
// its KV watch a moment later, out of a foreign client's sight: tests with
// several routers register tools and groups first, then add routers.
func (s *sys) addRouter() {
	s.t.Helper()
	if _, err := s.d.AddRouter(s.t.Context()); err != nil {
		s.t.Fatal(err)
	}
}

// ---------------------------------------------------------------------------
// CloudEvents, by hand

// Event is a CloudEvent as received, with the NATS message it came in.
type Event struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject"`
	DataContentType string          `json:"datacontenttype"`
	Time            string          `json:"time"`
	SessionID       string          `json:"sessionid"`
	ReplyID         string          `json:"replyid"`
	ToolCallID      string          `json:"toolcallid"`
	TraceParent     string          `json:"traceparent"`
	TraceState      string          `json:"tracestate"`
	ExpiryTime      string          `json:"expirytime"`
	Data            json.RawMessage `json:"data"`

	Attrs map[string]json.RawMessage `json:"-"` // every top-level member as sent
	Msg   *nats.Msg                  `json:"-"`
}

// out is an event to send; attrs are extension attributes (and overrides).
type out struct {
	typ   string
	data  any // marshalled with encoding/json; json.RawMessage goes as is; nil means no data
	attrs map[string]string
}

// encode builds a structured-mode CloudEvent by hand.
func (o out) encode(t testing.TB) []byte {
	t.Helper()
	ev := M{
		"specversion":     "1.0",
		"id":              nextID("ev"),
		"source":          agentSource,
		"type":            o.typ,
		"datacontenttype": ctJSON,
		"time":            time.Now().UTC().Format(time.RFC3339Nano),
	}
	for k, v := range o.attrs {
		ev[k] = v
	}
	if o.data != nil {
		ev["data"] = o.data
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// msg returns the structured-mode NATS message carrying o to subject.
func (o out) msg(t testing.TB, subject string) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set("content-type", ctEvent)
	if tp := o.attrs["traceparent"]; tp != "" {
		m.Header.Set("traceparent", tp)
	}
	if ts := o.attrs["tracestate"]; ts != "" {
		m.Header.Set("tracestate", ts)
	}
	m.Data = o.encode(t)
	return m
}

// binaryMsg returns o in binary mode: every attribute a lower-case,
// percent-encoded ce- header, the body the data, content-type the data's.
func (o out) binaryMsg(t testing.TB, subject string) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(subject)
	attrs := map[string]string{"specversion": "1.0", "id": nextID("ev"), "source": agentSource, "type": o.typ,
		"time": time.Now().UTC().Format(time.RFC3339Nano)}
	for k, v := range o.attrs {
		attrs[k] = v
	}
	for k, v := range attrs {
		m.Header.Set("ce-"+k, pctEncode(v))
	}
	m.Header.Set("content-type", ctJSON)
	if o.data != nil {
		b, err := json.Marshal(o.data)
		if err != nil {
			t.Fatal(err)
		}
		m.Data = b
	}
	return m
}

// pctEncode percent-encodes what the CloudEvents HTTP/NATS bindings require:
// space, double quote, percent and anything outside printable ASCII.
func pctEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || c == '"' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// decodeEvent parses a structured-mode event that the system sent and
// checks the envelope rules of docs/protocol.md 1 that every sender must follow.
func decodeEvent(t testing.TB, m *nats.Msg) *Event {
	t.Helper()
	if ct := m.Header.Get("content-type"); ct != ctEvent {
		t.Errorf("message on %s: NATS header content-type = %q, want %q", m.Subject, ct, ctEvent)
	}
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(m.Data, &attrs); err != nil {
		t.Fatalf("message on %s is not a JSON object: %v\n%s", m.Subject, err, m.Data)
	}
	e := &Event{Attrs: attrs, Msg: m}
	if err := json.Unmarshal(m.Data, e); err != nil {
		t.Fatalf("message on %s is not a CloudEvent: %v\n%s", m.Subject, err, m.Data)
	}
	for k, v := range attrs {
		if k != strings.ToLower(k) || len(k) > 20 {
			t.Errorf("event %s: attribute name %q is not lower-case or longer than 20", e.Type, k)
		}
		if k != "data" && (len(v) == 0 || v[0] != '"') {
			t.Errorf("event %s: attribute %s is not a string: %s", e.Type, k, v)
		}
	}
	if e.SpecVersion != "1.0" {
		t.Errorf("event %s: specversion %q, want 1.0", e.Type, e.SpecVersion)
	}
	if e.ID == "" || e.Source == "" || e.Type == "" {
		t.Errorf("event on %s: id %q, source %q, type %q must be non-empty", m.Subject, e.ID, e.Source, e.Type)
	}
	if _, err := url.Parse(e.Source); err != nil {
		t.Errorf("event %s: source %q is not a URI-reference: %v", e.Type, e.Source, err)
	}
	if e.DataContentType != ctJSON {
		t.Errorf("event %s: datacontenttype %q, want %q", e.Type, e.DataContentType, ctJSON)
	}
	if _, err := time.Parse(time.RFC3339Nano, e.Time); err != nil {
		t.Errorf("event %s: time %q is not RFC 3339", e.Type, e.Time)
	}
	if e.ExpiryTime != "" {
		if _, err := time.Parse(time.RFC3339Nano, e.ExpiryTime); err != nil {
			t.Errorf("event %s: expirytime %q is not RFC 3339", e.Type, e.ExpiryTime)
		}
	}
	for _, id := range []struct{ name, v string }{{"sessionid", e.SessionID}, {"replyid", e.ReplyID}, {"toolcallid", e.ToolCallID}} {
		if id.v != "" && !idRE.MatchString(id.v) {
			t.Errorf("event %s: %s %q is not a valid identifier", e.Type, id.name, id.v)
		}
	}
	if tp := e.TraceParent; tp != "" && m.Header.Get("traceparent") != tp {
		t.Errorf("event %s: traceparent attribute %q not copied into the NATS header (got %q)", e.Type, tp, m.Header.Get("traceparent"))
	}
	if ts := e.TraceState; ts != "" && m.Header.Get("tracestate") != ts {
		t.Errorf("event %s: tracestate attribute %q not copied into the NATS header (got %q)", e.Type, ts, m.Header.Get("tracestate"))
	}
	return e
}

// fromRouter checks that e was sent by a router.
func fromRouter(t testing.TB, e *Event) {
	t.Helper()
	if !routerSrc.MatchString(e.Source) {
		t.Errorf("event %s: source %q, want toolbus/router/<instance>", e.Type, e.Source)
	}
}

// dataAs decodes e's data into v.
func dataAs(t testing.TB, e *Event, v any) {
	t.Helper()
	if len(e.Data) == 0 {
		t.Fatalf("event %s has no data", e.Type)
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		t.Fatalf("event %s: data %s: %v", e.Type, e.Data, err)
	}
}

// keys returns the member names of a JSON object.
func keys(t testing.TB, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s", raw)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// wantKeys fails unless raw has exactly the given member names.
func wantKeys(t testing.TB, what string, raw json.RawMessage, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := keys(t, raw); !slices.Equal(got, want) {
		t.Errorf("%s: keys %v, want %v\n%s", what, got, want, raw)
	}
}

// hasKeys fails unless raw has at least the given member names.
func hasKeys(t testing.TB, what string, raw json.RawMessage, want ...string) {
	t.Helper()
	got := keys(t, raw)
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("%s: key %q missing; has %v\n%s", what, k, got, raw)
		}
	}
}

// ---------------------------------------------------------------------------
// Request/reply

// request sends m and returns the reply event, checking its envelope.
func (s *sys) request(t testing.TB, m *nats.Msg) *Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	resp, err := s.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		t.Fatalf("request on %s: %v", m.Subject, err)
	}
	e := decodeEvent(t, resp)
	return e
}

// send publishes m and waits until the server has it.
func (s *sys) send(t testing.TB, m *nats.Msg) {
	t.Helper()
	if err := s.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := s.nc.FlushTimeout(bound); err != nil {
		t.Fatal(err)
	}
}

// wireError is the data of io.toolbus.error.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// wantError fails unless e is an io.toolbus.error with code (and, when msg
// is not empty, exactly that message).
func wantError(t testing.TB, e *Event, code, msg string) wireError {
	t.Helper()
	if e.Type != tError {
		t.Fatalf("reply type %s, want %s with code %s; data %s", e.Type, tError, code, e.Data)
	}
	fromRouter(t, e)
	wantKeys(t, "io.toolbus.error data", e.Data, "code", "message")
	var we wireError
	dataAs(t, e, &we)
	if we.Code != code {
		t.Fatalf("error code %q (%s), want %q", we.Code, we.Message, code)
	}
	if we.Message == "" {
		t.Errorf("error %s has an empty message", code)
	}
	if msg != "" && we.Message != msg {
		t.Errorf("error message %q, want %q", we.Message, msg)
	}
	return we
}

// ---------------------------------------------------------------------------
// Calls

// Call is one call of a batch, as sent.
type Call struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Input any    `json:"input,omitempty"`
}

// Block is an output block.
type Block struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// Result is a call's result (docs/protocol.md 3.3).
type Result struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	State    string          `json:"state"`
	Output   []Block         `json:"output"`
	Error    *ResultError    `json:"error"`
	Metadata json.RawMessage `json:"metadata"`
}

// ResultError is result.error.
type ResultError struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Details []Detail `json:"details"`
}

// Detail is one entry of error.details.
type Detail struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Parked is one entry of reply.parked and call.parked.
type Parked struct {
	ID             string          `json:"id"`
	Name           string          `json:"name"`
	Input          json.RawMessage `json:"input"`
	Kind           string          `json:"kind"`
	Subject        string          `json:"subject"`
	SuggestedRules []M             `json:"suggested_rules"`
}

// Reply is the data of io.toolbus.call.reply.
type Reply struct {
	Results []Result `json:"results"`
	Parked  []Parked `json:"parked"`
}

// batch builds io.toolbus.call.batch for session with reply id replyID.
func batch(session, replyID string, data M, attrs ...string) out {
	a := map[string]string{"id": replyID, "sessionid": session}
	for i := 0; i+1 < len(attrs); i += 2 {
		a[attrs[i]] = attrs[i+1]
	}
	return out{typ: tCallBatch, data: data, attrs: a}
}

// callsData returns batch data holding calls.
func callsData(calls ...Call) M { return M{"calls": calls} }

// callRaw sends a batch and returns the reply event, whatever its type.
func (s *sys) callRaw(t testing.TB, session, replyID string, data M, attrs ...string) *Event {
	t.Helper()
	return s.request(t, batch(session, replyID, data, attrs...).msg(t, s.subj("call", session)))
}

// call sends a batch and returns its io.toolbus.call.reply, checked for shape.
func (s *sys) call(t testing.TB, session, replyID string, data M, attrs ...string) Reply {
	t.Helper()
	e := s.callRaw(t, session, replyID, data, attrs...)
	return s.wantReply(t, e, session, replyID)
}

// wantReply checks that e is an io.toolbus.call.reply and returns its data.
func (s *sys) wantReply(t testing.TB, e *Event, session, replyID string) Reply {
	t.Helper()
	if e.Type != tCallReply {
		t.Fatalf("reply type %s, want %s; data %s", e.Type, tCallReply, e.Data)
	}
	fromRouter(t, e)
	// docs/protocol.md does not require these attributes on the reply; when
	// present they must be right.
	if e.SessionID != "" && e.SessionID != session || e.ReplyID != "" && e.ReplyID != replyID {
		t.Errorf("reply: sessionid %q replyid %q, want %q %q", e.SessionID, e.ReplyID, session, replyID)
	}
	hasKeys(t, "call.reply data", e.Data, "results")
	var r Reply
	dataAs(t, e, &r)
	for _, res := range r.Results {
		checkResult(t, res)
	}
	for _, p := range r.Parked {
		if p.Subject != s.subj("answer", p.Name) {
			t.Errorf("parked %s: subject %q, want %q", p.ID, p.Subject, s.subj("answer", p.Name))
		}
		if !slices.Contains([]string{"external", "confirm", "queued"}, p.Kind) {
			t.Errorf("parked %s: kind %q", p.ID, p.Kind)
		}
	}
	return r
}

// checkResult checks the invariants of docs/protocol.md 3.3 on any result.
func checkResult(t testing.TB, r Result) {
	t.Helper()
	switch r.State {
	case "success", "error", "interrupted", "denied":
	default:
		t.Errorf("result %s: state %q", r.ID, r.State)
	}
	if r.Output == nil {
		t.Errorf("result %s: no output", r.ID)
	}
	for i, b := range r.Output {
		switch b.Type {
		case "text":
		case "data":
			if (b.Data == "") == (b.URL == "") {
				t.Errorf("result %s: data block %d has not exactly one of data and url", r.ID, i)
			}
		default:
			t.Errorf("result %s: block %d has type %q", r.ID, i, b.Type)
		}
	}
	if r.State != "success" {
		if r.Error == nil || r.Error.Code == "" {
			t.Errorf("result %s (%s) has no error code", r.ID, r.State)
		}
		if textOf(r) == "" {
			t.Errorf("result %s (%s) has no readable text block", r.ID, r.State)
		}
	}
}

// textOf joins the text blocks of a result.
func textOf(r Result) string {
	var parts []string
	for _, b := range r.Output {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// wantIDs fails unless the results are exactly the given call ids, in order.
func wantIDs(t testing.TB, what string, rs []Result, ids ...string) {
	t.Helper()
	var got []string
	for _, r := range rs {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("%s: result ids %v, want %v", what, got, ids)
	}
}

// wantSuccess fails unless r succeeded with exactly text.
func wantSuccess(t testing.TB, r Result, text string) {
	t.Helper()
	if r.State != "success" || r.Error != nil {
		t.Fatalf("call %s: want success, got %s", r.ID, jsonOf(r))
	}
	if got := textOf(r); got != text {
		t.Fatalf("call %s: text %q, want %q", r.ID, got, text)
	}
}

// wantFailure fails unless r has state and code and, when text is not
// empty, exactly that readable text (which error.message repeats).
func wantFailure(t testing.TB, r Result, state, code, text string) {
	t.Helper()
	if r.State != state || r.Error == nil || r.Error.Code != code {
		t.Fatalf("call %s: want state %s code %s, got %s", r.ID, state, code, jsonOf(r))
	}
	if text == "" {
		return
	}
	if got := textOf(r); got != text {
		t.Fatalf("call %s: text %q, want %q", r.ID, got, text)
	}
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// Events

// events is a core-NATS subscription to a subject, opened before the test
// acts so that nothing is missed.
type events struct {
	t   testing.TB
	sub *nats.Subscription
	ch  chan *nats.Msg
}

// watch subscribes to P.events.<session>.
func (s *sys) watch(t testing.TB, session string) *events {
	t.Helper()
	return s.subscribe(t, s.subj("events", session))
}

// subscribe opens a plain subscription to subject.
func (s *sys) subscribe(t testing.TB, subject string) *events {
	t.Helper()
	ch := make(chan *nats.Msg, 4096)
	sub, err := s.nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.nc.FlushTimeout(bound); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &events{t: t, sub: sub, ch: ch}
}

// next returns the next event, failing after bound.
func (ev *events) next() *Event {
	ev.t.Helper()
	select {
	case m := <-ev.ch:
		return decodeEvent(ev.t, m)
	case <-time.After(bound):
		ev.t.Fatalf("no event on %s within %v", ev.sub.Subject, bound)
		return nil
	}
}

// until collects events up to and including the first for which stop is true.
func (ev *events) until(stop func(*Event) bool) []*Event {
	ev.t.Helper()
	var got []*Event
	deadline := time.After(bound)
	for {
		select {
		case m := <-ev.ch:
			e := decodeEvent(ev.t, m)
			got = append(got, e)
			if stop(e) {
				return got
			}
		case <-deadline:
			ev.t.Fatalf("timed out on %s after %d events: %s", ev.sub.Subject, len(got), eventsString(got))
			return nil
		}
	}
}

// pending returns the events received and not read yet.
func (ev *events) pending() []*Event {
	ev.t.Helper()
	var got []*Event
	for {
		select {
		case m := <-ev.ch:
			got = append(got, decodeEvent(ev.t, m))
		default:
			return got
		}
	}
}

// doneOf matches the io.toolbus.batch.done of replyID.
func doneOf(replyID string) func(*Event) bool {
	return func(e *Event) bool { return e.Type == tBatchDone && e.ReplyID == replyID }
}

// typeIs matches events of typ (and replyID when not empty).
func typeIs(typ, replyID string) func(*Event) bool {
	return func(e *Event) bool { return e.Type == typ && (replyID == "" || e.ReplyID == replyID) }
}

func eventsString(es []*Event) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n  %s reply=%s call=%s %s", e.Type, e.ReplyID, e.ToolCallID, e.Data)
	}
	return b.String()
}

// checkBatchEvents checks docs/protocol.md 3.4 on the events of one batch that
// ended with batch.done: every event carries sessionid and replyid, each
// call.result its toolcallid and subject = call id, exactly one call.result
// per call before batch.done, and batch.done holds every result in call
// order, equal to the call.result events. It returns batch.done's results.
func checkBatchEvents(t testing.TB, es []*Event, session, replyID string, callIDs ...string) []Result {
	t.Helper()
	seen := map[string]Result{}
	ids := map[string]bool{}
	var done []Result
	nDone := 0
	for i, e := range es {
		if ids[e.Source+" "+e.ID] {
			t.Errorf("two events with source %s and id %s", e.Source, e.ID)
		}
		ids[e.Source+" "+e.ID] = true
		if e.ReplyID != replyID {
			continue
		}
		fromRouterOrWorker(t, e)
		if e.SessionID != session {
			t.Errorf("event %s: sessionid %q, want %q", e.Type, e.SessionID, session)
		}
		switch e.Type {
		case tCallResult:
			if nDone > 0 {
				t.Errorf("call.result for %s after batch.done", e.ToolCallID)
			}
			if e.ToolCallID == "" || e.Subject != e.ToolCallID {
				t.Errorf("call.result: toolcallid %q, subject %q: both must be the call id", e.ToolCallID, e.Subject)
			}
			var r Result
			dataAs(t, e, &r)
			checkResult(t, r)
			if r.ID != e.ToolCallID {
				t.Errorf("call.result: data id %q, toolcallid %q", r.ID, e.ToolCallID)
			}
			if _, dup := seen[r.ID]; dup {
				t.Errorf("two call.result events for call %s:%s", r.ID, eventsString(es))
			}
			seen[r.ID] = r
		case tBatchDone:
			nDone++
			if i != len(es)-1 {
				t.Errorf("batch.done is not the last event of the batch")
			}
			if e.ToolCallID != "" {
				t.Errorf("batch.done carries toolcallid %q", e.ToolCallID)
			}
			var d struct {
				Results []Result `json:"results"`
			}
			dataAs(t, e, &d)
			done = d.Results
		case tCallParked:
			if e.ToolCallID != "" {
				t.Errorf("call.parked carries toolcallid %q", e.ToolCallID)
			}
		case tCallProg:
		default:
			t.Errorf("unexpected event type %s on the events subject", e.Type)
		}
	}
	if nDone != 1 {
		t.Fatalf("%d batch.done events, want 1:%s", nDone, eventsString(es))
	}
	wantIDs(t, "batch.done", done, callIDs...)
	// docs/protocol.md 3.4: a call.result is stored only for a call that
	// finished after the reply, one a cancel ended, or every call when the
	// batch asked ("events": "calls"); the tests of those cases count them
	// (checkCallResults). Any that came must match batch.done.
	for _, r := range done {
		if ev, ok := seen[r.ID]; ok && jsonOf(ev) != jsonOf(r) {
			t.Errorf("call %s: call.result %s differs from batch.done %s", r.ID, jsonOf(ev), jsonOf(r))
		}
	}
	return done
}

// checkCallResults fails unless the events of replyID hold a call.result
// for exactly the calls named by want, each before the batch's batch.done
// (docs/protocol.md 3.4).
func checkCallResults(t testing.TB, es []*Event, replyID string, want ...string) {
	t.Helper()
	var got []string
	done := false
	for _, e := range es {
		if e.ReplyID != replyID {
			continue
		}
		switch e.Type {
		case tCallResult:
			if done {
				t.Errorf("call.result of %s after batch.done", e.ToolCallID)
			}
			got = append(got, e.ToolCallID)
		case tBatchDone:
			done = true
		}
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("call.result events for %v, want %v:%s", got, want, eventsString(es))
	}
}

func fromRouterOrWorker(t testing.TB, e *Event) {
	t.Helper()
	if e.Type == tCallProg {
		return // workers publish progress
	}
	fromRouter(t, e)
}

// ---------------------------------------------------------------------------
// Tools and workers, by hand

// def returns a tool definition with the fields tests usually want: an
// object schema without properties, permission "allow" so that tools run
// in the default permission mode without asking (permissions have their own
// tests), and concurrency_safe true. extra overrides or adds fields.
func def(name string, extra ...M) M {
	d := M{"name": name, "description": "Conformance tool " + name + ".",
		"input_schema": M{"type": "object", "properties": M{}}, "permission": "allow", "concurrency_safe": true}
	for _, e := range extra {
		for k, v := range e {
			d[k] = v
		}
	}
	return d
}

// execCall is one io.toolbus.exec a raw worker received.
type execCall struct {
	ev   *Event
	data json.RawMessage
	Call struct {
		ID, Name string
		Input    json.RawMessage
	}
	User    json.RawMessage
	Context json.RawMessage
	Attempt int
	State   json.RawMessage
	ctx     context.Context // ends when a cancel names the call, or the test ends
	w       *worker
	replied atomic.Bool
}

// respond answers the exec request with data of type typ.
func (c *execCall) respond(typ string, data any) {
	if !c.replied.CompareAndSwap(false, true) {
		return
	}
	o := out{typ: typ, data: data, attrs: map[string]string{"source": "toolbus/worker/" + c.w.id,
		"sessionid": c.ev.SessionID, "replyid": c.ev.ReplyID, "toolcallid": c.ev.ToolCallID}}
	m := o.msg(c.w.t, c.ev.Msg.Reply)
	_ = c.w.nc.PublishMsg(m)
}

// result answers io.toolbus.exec.result with state and output; extra adds
// members (metadata, state_patch).
func (c *execCall) result(state string, output []Block, extra ...M) {
	d := M{"state": state, "output": output}
	for _, e := range extra {
		for k, v := range e {
			d[k] = v
		}
	}
	c.respond(tExecResult, d)
}

// text answers success with one text block.
func (c *execCall) text(s string) { c.result("success", []Block{{Type: "text", Text: s}}) }

// progress publishes io.toolbus.call.progress for the call.
func (c *execCall) progress(seq int, text string) {
	o := out{typ: tCallProg, data: M{"seq": seq, "output": []Block{{Type: "text", Text: text}}},
		attrs: map[string]string{"source": "toolbus/worker/" + c.w.id, "sessionid": c.ev.SessionID,
			"replyid": c.ev.ReplyID, "toolcallid": c.ev.ToolCallID, "subject": c.ev.ToolCallID}}
	_ = c.w.nc.PublishMsg(o.msg(c.w.t, c.w.s.subj("events", c.ev.SessionID)))
}

// handler runs one exec call; it answers with c.result/c.text, or not at all.
type handler func(c *execCall)

// worker is a tool worker written from docs/protocol.md 5 and 7 alone.
type worker struct {
	t      testing.TB
	s      *sys
	nc     *nats.Conn
	id     string
	reg    M // the io.toolbus.register data
	h      handler
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup // the beat and every running handler
	mu     sync.Mutex
	halted bool                // under mu: set by halt; later execs are dropped
	calls  map[string]*callCtl // sessionid/replyid/callid → in flight
	execs  atomic.Int64        // exec requests received
	log    []*execCall
	Ack    json.RawMessage // the first register.ack data
}

type callCtl struct {
	session, reply, call string
	cancel               context.CancelFunc
}

// startWorker starts a raw worker serving defs with h (groups may be nil),
// waits for its registration ack and returns it. The worker subscribes to
// P.exec.<tool> in queue group P-exec-<tool> and to P.cancel.>, registers,
// and beats every workerHeartbeat until the test ends, then leaves.
func (s *sys) startWorker(t testing.TB, defs []M, groups []M, h handler) *worker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{t: t, s: s, nc: testkit.Connect(t, s.srv), id: nextID("w"), h: h, ctx: ctx, stop: cancel,
		calls: map[string]*callCtl{}}
	w.reg = M{"worker": w.id, "tools": defs}
	if groups != nil {
		w.reg["groups"] = groups
	}
	for _, d := range defs {
		if ext, _ := d["external"].(bool); ext {
			continue
		}
		name := d["name"].(string)
		if _, err := w.nc.QueueSubscribe(s.subj("exec", name), s.p+"-exec-"+name, w.onExec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.nc.Subscribe(s.subj("cancel", ">"), w.onCancel); err != nil {
		t.Fatal(err)
	}
	if err := w.nc.FlushTimeout(bound); err != nil {
		t.Fatal(err)
	}
	ack := w.register(t, w.reg)
	if ack.Type != tRegisterAck {
		t.Fatalf("register: reply %s %s", ack.Type, ack.Data)
	}
	w.Ack = ack.Data
	w.wg.Add(1)
	go w.beat()
	t.Cleanup(w.close)
	return w
}

// register sends one io.toolbus.register and returns the reply.
func (w *worker) register(t testing.TB, data M) *Event {
	t.Helper()
	o := out{typ: tRegister, data: data, attrs: map[string]string{"source": "toolbus/worker/" + w.id}}
	return w.s.request(t, o.msg(t, w.s.subj("register")))
}

func (w *worker) beat() {
	defer w.wg.Done()
	tick := time.NewTicker(workerHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-tick.C:
			o := out{typ: tRegister, data: w.reg, attrs: map[string]string{"source": "toolbus/worker/" + w.id}}
			ctx, cancel := context.WithTimeout(w.ctx, bound)
			_, _ = w.nc.RequestMsgWithContext(ctx, o.msg(w.t, w.s.subj("register")))
			cancel()
		}
	}
}

// leave sends {"worker", "leaving": true} and stops beating.
func (w *worker) leave(t testing.TB) *Event {
	t.Helper()
	w.halt()
	return w.register(t, M{"worker": w.id, "leaving": true})
}

// halt stops beating and running calls, and waits for both. An exec that
// arrives later is dropped: onExec adds to wg under mu only while not
// halted, so no Add races the Wait (a WaitGroup forbids an Add from zero
// concurrent with Wait; TestApproveSubject hit it under load).
func (w *worker) halt() {
	w.mu.Lock()
	w.halted = true
	w.mu.Unlock()
	w.stop()
	w.wg.Wait()
}

func (w *worker) close() {
	w.halt()
	o := out{typ: tRegister, data: M{"worker": w.id, "leaving": true}, attrs: map[string]string{"source": "toolbus/worker/" + w.id}}
	_ = w.nc.PublishMsg(o.msg(w.t, w.s.subj("register")))
	_ = w.nc.Drain()
}

func (w *worker) onExec(m *nats.Msg) {
	w.execs.Add(1)
	var e *Event
	ok := func() bool {
		var attrs map[string]json.RawMessage
		if json.Unmarshal(m.Data, &attrs) != nil {
			return false
		}
		e = &Event{Attrs: attrs, Msg: m}
		return json.Unmarshal(m.Data, e) == nil && e.Type == tExec
	}()
	if !ok {
		o := out{typ: tError, data: M{"code": "bad_event", "message": "cannot decode the exec request"},
			attrs: map[string]string{"source": "toolbus/worker/" + w.id}}
		_ = w.nc.PublishMsg(o.msg(w.t, m.Reply))
		return
	}
	c := &execCall{ev: e, data: e.Data, w: w}
	var d struct {
		Call    rawCall         `json:"call"`
		User    json.RawMessage `json:"user"`
		Context json.RawMessage `json:"context"`
		Attempt int             `json:"attempt"`
		State   json.RawMessage `json:"state"`
	}
	_ = json.Unmarshal(e.Data, &d)
	c.Call.ID, c.Call.Name, c.Call.Input = d.Call.ID, d.Call.Name, d.Call.Input
	c.User, c.Context, c.Attempt, c.State = d.User, d.Context, d.Attempt, d.State
	ctx, cancel := context.WithCancel(w.ctx)
	c.ctx = ctx
	key := e.SessionID + "/" + e.ReplyID + "/" + e.ToolCallID
	w.mu.Lock()
	if w.halted {
		w.mu.Unlock()
		cancel()
		return
	}
	w.calls[key] = &callCtl{session: e.SessionID, reply: e.ReplyID, call: e.ToolCallID, cancel: cancel}
	w.log = append(w.log, c)
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		defer func() {
			w.mu.Lock()
			delete(w.calls, key)
			w.mu.Unlock()
			cancel()
		}()
		w.h(c)
	}()
}

// onCancel cancels the context of in-flight calls that a cancel names.
func (w *worker) onCancel(m *nats.Msg) {
	var e Event
	if json.Unmarshal(m.Data, &e) != nil || e.Type != tCallCancel || e.ReplyID == "" {
		return
	}
	session := strings.TrimPrefix(m.Subject, w.s.p+".cancel.")
	var d struct {
		Calls []string `json:"calls"`
	}
	if len(e.Data) > 0 {
		_ = json.Unmarshal(e.Data, &d)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.calls {
		if c.session == session && c.reply == e.ReplyID && (len(d.Calls) == 0 || slices.Contains(d.Calls, c.call)) {
			c.cancel()
		}
	}
}

// received returns the exec calls received so far.
func (w *worker) received() []*execCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.log)
}

// echo answers every call with "<name> ran" .
func echo(c *execCall) { c.text(c.Call.Name + " ran") }

// ---------------------------------------------------------------------------
// Listing and readiness

// ToolsList is the data of io.toolbus.tools.list.
type ToolsList struct {
	Tools        []json.RawMessage `json:"tools"`
	Groups       []GroupInfo       `json:"groups"`
	SkillsPrompt *string           `json:"skills_prompt"`
}

// GroupInfo is one entry of tools.list groups.
type GroupInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Scope       string `json:"scope"`
	Active      bool   `json:"active"`
}

// listRaw sends io.toolbus.tools.query for session and returns the reply.
func (s *sys) listRaw(t testing.TB, session string, query M) *Event {
	t.Helper()
	var data any
	if query != nil {
		data = query
	}
	o := out{typ: tToolsQuery, data: data, attrs: map[string]string{"sessionid": session}}
	return s.request(t, o.msg(t, s.subj("tools", session)))
}

// list returns the tools.list data for session.
func (s *sys) list(t testing.TB, session string, query M) ToolsList {
	t.Helper()
	e := s.listRaw(t, session, query)
	if e.Type != tToolsList {
		t.Fatalf("tools reply %s %s", e.Type, e.Data)
	}
	fromRouter(t, e)
	// sessionrev (docs/protocol.md 4.1, 4.2) once the session is stored.
	if slices.Contains(keys(t, e.Data), "sessionrev") {
		wantKeys(t, "tools.list data", e.Data, "tools", "groups", "skills_prompt", "sessionrev")
	} else {
		wantKeys(t, "tools.list data", e.Data, "tools", "groups", "skills_prompt")
	}
	var l ToolsList
	dataAs(t, e, &l)
	return l
}

// names returns the name of each listed tool (toolbus/anthropic/gemini/mcp
// and openai-responses have a top-level name; openai nests it).
func names(t testing.TB, tools []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, raw := range tools {
		var x struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &x); err != nil {
			t.Fatal(err)
		}
		if x.Name == "" {
			x.Name = x.Function.Name
		}
		out = append(out, x.Name)
	}
	return out
}

// waitListed polls the listing of session until every name is listed.
func (s *sys) waitListed(t testing.TB, session string, want ...string) {
	t.Helper()
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		got := names(t, s.list(t, session, nil).Tools)
		for _, n := range want {
			if !slices.Contains(got, n) {
				return fmt.Errorf("tool %s not listed for session %s (listed: %v)", n, session, got)
			}
		}
		return nil
	})
}

// waitUnlisted polls until none of the names is listed.
func (s *sys) waitUnlisted(t testing.TB, session string, gone ...string) {
	t.Helper()
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		got := names(t, s.list(t, session, nil).Tools)
		for _, n := range gone {
			if slices.Contains(got, n) {
				return fmt.Errorf("tool %s still listed (listed: %v)", n, got)
			}
		}
		return nil
	})
}

// serve starts a worker for defs and waits until each non-external one is
// listed for a probe session (readiness: a foreign client's only signal).
func (s *sys) serve(t testing.TB, h handler, defs ...M) *worker {
	t.Helper()
	w := s.startWorker(t, defs, nil, h)
	var ns []string
	for _, d := range defs {
		ns = append(ns, d["name"].(string))
	}
	s.waitListed(t, "probe", ns...)
	return w
}

// ---------------------------------------------------------------------------
// Admin and answers

// admin sends io.toolbus.admin on P.admin.<verb> (session "" means none).
func (s *sys) admin(t testing.TB, verb, session string, data any) *Event {
	t.Helper()
	attrs := map[string]string{}
	if session != "" {
		attrs["sessionid"] = session
	}
	o := out{typ: tAdmin, data: data, attrs: attrs}
	return s.request(t, o.msg(t, s.subj("admin", verb)))
}

// adminOK is admin that fails unless the reply is io.toolbus.admin.reply.
func (s *sys) adminOK(t testing.TB, verb, session string, data any) json.RawMessage {
	t.Helper()
	e := s.admin(t, verb, session, data)
	if e.Type != tAdminReply {
		t.Fatalf("admin %s: reply %s %s", verb, e.Type, e.Data)
	}
	fromRouter(t, e)
	return e.Data
}

// putGroup defines a group through the admin verb groups.put.
func (s *sys) putGroup(t testing.TB, g M) {
	t.Helper()
	s.adminOK(t, "groups.put", "", g)
}

// answer sends io.toolbus.answer for one call on P.answer.<tool>.
func (s *sys) answer(t testing.TB, tool, session, replyID, callID string, data any) *Event {
	t.Helper()
	o := out{typ: tAnswer, data: data, attrs: map[string]string{"source": "conformance/approver",
		"sessionid": session, "replyid": replyID, "toolcallid": callID}}
	return s.request(t, o.msg(t, s.subj("answer", tool)))
}

// answerOK fails unless the answer is acknowledged {"accepted": true}.
func (s *sys) answerOK(t testing.TB, tool, session, replyID, callID string, data any) {
	t.Helper()
	e := s.answer(t, tool, session, replyID, callID, data)
	if e.Type != tAnswerAck {
		t.Fatalf("answer to %s: reply %s %s", callID, e.Type, e.Data)
	}
	fromRouter(t, e)
	wantKeys(t, "answer.ack data", e.Data, "accepted")
	var a struct {
		Accepted bool `json:"accepted"`
	}
	dataAs(t, e, &a)
	if !a.Accepted {
		t.Fatalf("answer to %s: accepted false", callID)
	}
}

// cancel publishes io.toolbus.call.cancel for replyID (calls may be nil).
func (s *sys) cancel(t testing.TB, session, replyID string, calls []string) {
	t.Helper()
	var data any
	if calls != nil {
		data = M{"calls": calls}
	}
	o := out{typ: tCallCancel, data: data, attrs: map[string]string{"sessionid": session, "replyid": replyID}}
	s.send(t, o.msg(t, s.subj("cancel", session)))
}

// textAnswer is the data of an external answer with one text block.
func textAnswer(state, text string) M {
	return M{"state": state, "output": []Block{{Type: "text", Text: text}}}
}

// waitFor polls fn until it returns nil.
func waitFor(t testing.TB, fn func() error) {
	t.Helper()
	testkit.CheckFor(t, bound, 10*time.Millisecond, fn)
}

// waitChan waits for ch to close or deliver, failing after bound.
func waitChan[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bound):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// natsMsg turns a JetStream message into a NATS message for decodeEvent.
func natsMsg(m jetstream.Msg) *nats.Msg {
	return &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
}

// pendingReply is a request in flight.
type pendingReply struct {
	ch chan *nats.Msg
	s  *sys
}

// requestAsync sends m as a request without waiting for the reply.
func (s *sys) requestAsync(t testing.TB, m *nats.Msg) *pendingReply {
	t.Helper()
	inbox := nats.NewInbox()
	ch := make(chan *nats.Msg, 4)
	sub, err := s.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	m.Reply = inbox
	s.send(t, m)
	return &pendingReply{ch: ch, s: s}
}

// callAsync sends a batch without waiting for its reply.
func (s *sys) callAsync(t testing.TB, session, replyID string, data M, attrs ...string) *pendingReply {
	t.Helper()
	return s.requestAsync(t, batch(session, replyID, data, attrs...).msg(t, s.subj("call", session)))
}

// wait returns the reply event, failing after bound.
func (p *pendingReply) wait(t testing.TB) *Event {
	t.Helper()
	return decodeEvent(t, waitChan(t, p.ch, "reply"))
}

// reply waits for an io.toolbus.call.reply.
func (p *pendingReply) reply(t testing.TB, session, replyID string) Reply {
	t.Helper()
	return p.s.wantReply(t, p.wait(t), session, replyID)
}

// gate is a one-shot signal between a tool handler and the test.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wait blocks until the gate opens or ctx ends; it reports whether it opened.
func (g *gate) wait(ctx context.Context) bool {
	select {
	case <-g.ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitT waits for the gate in a test, failing after bound.
func (g *gate) waitT(t testing.TB, what string) {
	t.Helper()
	select {
	case <-g.ch:
	case <-time.After(bound):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// errorf is fmt.Errorf, for polling conditions.
func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// dedupeResults drops a call.result event that repeats an earlier one of
// the same call byte for byte. It keeps tests of other rules running past
// the known duplicate of a confirmed call's result (see
// TestDiscrepancyConfirmedCallOneResultEvent, which checks it strictly).
func dedupeResults(es []*Event) []*Event {
	seen := map[string]string{}
	var out []*Event
	for _, e := range es {
		if e.Type == tCallResult {
			k := e.ReplyID + "/" + e.ToolCallID
			if prev, ok := seen[k]; ok && prev == string(e.Data) {
				continue
			}
			seen[k] = string(e.Data)
		}
		out = append(out, e)
	}
	return out
}

// rawCall is a call as the router sends it on: input already decoded once.
type rawCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}
