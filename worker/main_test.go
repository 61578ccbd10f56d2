package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// Every test shuts down what it started (workers, connections, servers) in
// t.Cleanup, so nothing may be left running when the package's tests end.
// A child process of BenchmarkWorkerProcess plays its role instead.
func TestMain(m *testing.M) {
	if role := os.Getenv(envBenchChild); role != "" {
		os.Exit(runBenchChild(role, os.Getenv(envBenchURL)))
	}
	goleak.VerifyTestMain(m)
}

// bound is the generous limit for anything that should happen "soon" on a
// busy two-core machine under -race.
const bound = 10 * time.Second

// fixture is one nats-server, a driver connection standing in for the
// router, and a fake router answering registrations on P.register.>.
type fixture struct {
	t    *testing.T
	srv  *server.Server
	nc   *nats.Conn
	subj bus.Subjects
	reg  *registrar
}

// registrar is a fake router on P.register.>: it records every registration
// and answers with respond (by default: every tool accepted).
type registrar struct {
	mu      sync.Mutex
	regs    []bus.Register
	on      []string      // the subject of each of regs
	leaving chan struct{} // closed on the first leaving registration
	once    sync.Once
	respond func(bus.Register) (typ string, data any)
}

func acceptAll(r bus.Register) (string, any) {
	ack := bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{}}
	for _, d := range r.Tools {
		ack.Accepted = append(ack.Accepted, d.Name)
	}
	return bus.TypeRegisterAck, ack
}

func (r *registrar) handle(nc *nats.Conn) nats.MsgHandler {
	return func(m *nats.Msg) {
		e, err := bus.Decode(m)
		if err != nil {
			_ = bus.RespondError(nc, m, "test/router", bus.Errorf(bus.CodeBadEvent, "%v", err))
			return
		}
		var reg bus.Register
		if err := e.DataAs(&reg); err != nil || e.Type != bus.TypeRegister {
			_ = bus.RespondError(nc, m, "test/router", bus.Errorf(bus.CodeBadEvent, "not a registration"))
			return
		}
		r.mu.Lock()
		r.regs = append(r.regs, reg)
		r.on = append(r.on, m.Subject)
		respond := r.respond
		r.mu.Unlock()
		if reg.Leaving {
			r.once.Do(func() { close(r.leaving) })
			_ = bus.Respond(nc, m, "test/router", bus.TypeRegisterAck, bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{}})
			return
		}
		typ, data := respond(reg)
		_ = bus.Respond(nc, m, "test/router", typ, data)
	}
}

// registrations returns a copy of what the fake router received.
func (r *registrar) registrations() []bus.Register {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bus.Register(nil), r.regs...)
}

// subjects returns the subject of each registration, in the order of
// registrations.
func (r *registrar) subjects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.on...)
}

func (r *registrar) setRespond(f func(bus.Register) (string, any)) {
	r.mu.Lock()
	r.respond = f
	r.mu.Unlock()
}

// newFixture starts a server and, when answer is true, the fake router.
func newFixture(t *testing.T, answer bool) *fixture {
	t.Helper()
	s := testkit.RunServer(t)
	f := &fixture{t: t, srv: s, nc: testkit.Connect(t, s), subj: bus.NewSubjects(""),
		reg: &registrar{leaving: make(chan struct{}), respond: acceptAll}}
	if answer {
		f.answerRegistrations()
	}
	return f
}

// answerRegistrations subscribes the fake router on P.register.>: the
// registrations of each tool and group (docs/protocol.md 7.1).
func (f *fixture) answerRegistrations() {
	f.t.Helper()
	nc := testkit.Connect(f.t, f.srv)
	if _, err := nc.Subscribe(f.subj.All("register"), f.reg.handle(nc)); err != nil {
		f.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
}

// newWorker creates a worker on its own connection; its ID defaults to "w1".
// It is stopped when the test ends, before its connection closes.
func (f *fixture) newWorker(cfg worker.Config) *worker.Worker {
	f.t.Helper()
	if cfg.ID == "" {
		cfg.ID = "w1"
	}
	w, err := worker.New(testkit.Connect(f.t, f.srv), cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		_ = w.Drain(ctx)
	})
	return w
}

// startWorker is newWorker, setup, Start, and a wait for the fake router's
// acknowledgement.
func (f *fixture) startWorker(cfg worker.Config, setup func(w *worker.Worker)) *worker.Worker {
	f.t.Helper()
	w := f.newWorker(cfg)
	setup(w)
	if err := w.Start(f.t.Context()); err != nil {
		f.t.Fatal(err)
	}
	waitClosed(f.t, w.Registered(), "registration acknowledged")
	return w
}

// execEvent is an io.toolbus.exec for tool in session s1, reply r1; mods
// change the event and the request before they are encoded.
func execEvent(t *testing.T, tool, callID, input string, mods ...func(*bus.Event, *bus.ExecRequest)) *bus.Event {
	t.Helper()
	req := bus.ExecRequest{Call: bus.Call{ID: callID, Name: tool, Input: json.RawMessage(input)}, Attempt: 1}
	if input == "" {
		req.Call.Input = nil
	}
	e := &bus.Event{SessionID: "s1", ReplyID: "r1", ToolCallID: callID}
	for _, m := range mods {
		m(e, &req)
	}
	ev, err := bus.NewEvent(bus.TypeExec, "toolbus/router/test", req)
	if err != nil {
		t.Fatal(err)
	}
	ev.SessionID, ev.ReplyID, ev.ToolCallID = e.SessionID, e.ReplyID, e.ToolCallID
	ev.ExpiryTime, ev.TraceParent, ev.TraceState = e.ExpiryTime, e.TraceParent, e.TraceState
	return ev
}

// inSession moves an exec request to another session and reply.
func inSession(session, reply string) func(*bus.Event, *bus.ExecRequest) {
	return func(e *bus.Event, _ *bus.ExecRequest) { e.SessionID, e.ReplyID = session, reply }
}

// request sends m and decodes the reply, which must be a structured-mode
// CloudEvent.
func (f *fixture) request(t *testing.T, m *nats.Msg) *bus.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	resp, err := f.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		t.Fatalf("request on %s: %v", m.Subject, err)
	}
	return decodeReply(t, resp)
}

func decodeReply(t *testing.T, resp *nats.Msg) *bus.Event {
	t.Helper()
	if bus.IsBinary(resp.Header) { // the answer to a binary-mode request (docs/protocol.md 5.2)
		ev, err := bus.Decode(resp)
		if err != nil {
			t.Fatalf("binary reply is not a CloudEvent: %v", err)
		}
		return ev
	}
	if ct := resp.Header.Get(bus.HeaderContentType); ct != bus.ContentTypeEvent {
		t.Errorf("reply content-type = %q, want %q", ct, bus.ContentTypeEvent)
	}
	ev, err := bus.Decode(&nats.Msg{Data: resp.Data})
	if err != nil {
		t.Fatalf("reply is not a CloudEvent: %v\n%s", err, resp.Data)
	}
	return ev
}

// exec runs one call of tool and returns the exec result.
func (f *fixture) exec(t *testing.T, ev *bus.Event, tool string) bus.ExecResult {
	t.Helper()
	return execResult(t, f.request(t, eventMsg(t, f.subj.Workers.Exec(tool), ev)))
}

// pending is a request sent without waiting for its reply.
type pending struct {
	t   *testing.T
	sub *nats.Subscription
}

// send publishes ev as a request on the exec subject of tool; the reply is
// read with wait.
func (f *fixture) send(t *testing.T, ev *bus.Event, tool string) *pending {
	t.Helper()
	inbox := f.nc.NewRespInbox()
	sub, err := f.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	m := eventMsg(t, f.subj.Workers.Exec(tool), ev)
	m.Reply = inbox
	if err := f.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &pending{t: t, sub: sub}
}

// wait returns the reply's exec result.
func (p *pending) wait() bus.ExecResult {
	p.t.Helper()
	m, err := p.sub.NextMsg(bound)
	if err != nil {
		p.t.Fatalf("no reply: %v", err)
	}
	return execResult(p.t, decodeReply(p.t, m))
}

// replied reports whether the reply is already there.
func (p *pending) replied() bool {
	n, _, _ := p.sub.Pending()
	return n > 0
}

func eventMsg(t *testing.T, subject string, ev *bus.Event) *nats.Msg {
	t.Helper()
	m, err := ev.Msg(subject)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// execResult fails unless ev is an io.toolbus.exec.result and decodes it.
func execResult(t *testing.T, ev *bus.Event) bus.ExecResult {
	t.Helper()
	if ev.Type != bus.TypeExecResult {
		t.Fatalf("reply type %s, want %s: %s", ev.Type, bus.TypeExecResult, ev.Data)
	}
	var res bus.ExecResult
	if err := ev.DataAs(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// wantText fails unless res has state and exactly one text block, text.
func wantText(t *testing.T, res bus.ExecResult, state, text string) {
	t.Helper()
	if res.State != state || len(res.Output) != 1 || res.Output[0].Type != bus.BlockText || res.Output[0].Text != text {
		t.Fatalf("result %s, want state %s text %q", jsonOf(res), state, text)
	}
}

// wantErrorEvent fails unless ev is an io.toolbus.error with code and a message.
func wantErrorEvent(t *testing.T, ev *bus.Event, code string) {
	t.Helper()
	if ev.Type != bus.TypeError {
		t.Fatalf("reply type %s, want %s: %s", ev.Type, bus.TypeError, ev.Data)
	}
	var be bus.Error
	if err := ev.DataAs(&be); err != nil {
		t.Fatal(err)
	}
	if be.Code != code || be.Message == "" {
		t.Fatalf("error %+v, want code %s with a message", be, code)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(bound):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// objectSchema is an object schema without properties.
var objectSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// raw adds a raw tool to w, failing the test on error.
func raw(t *testing.T, w *worker.Worker, name string, h worker.Handler) {
	t.Helper()
	if err := w.Handle(bus.ToolDef{Name: name, Description: "Test tool " + name + ".", InputSchema: objectSchema}, h); err != nil {
		t.Fatal(err)
	}
}

// textOut is a successful result holding one text block.
func textOut(s string) *bus.ExecResult { return &bus.ExecResult{Output: bus.Text(s)} }

// errNoResponders reports whether err says nobody serves the subject.
func errNoResponders(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || err != nil && strings.Contains(err.Error(), "no responders")
}
