package bus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

func TestRespond(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	sub, err := nc.SubscribeSync("reply.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Without a reply subject both are no-ops.
	if err := bus.Respond(nc, &nats.Msg{Subject: "x"}, "src", bus.TypeAnswerAck, bus.AnswerAck{Accepted: true}); err != nil {
		t.Fatal(err)
	}
	if err := bus.RespondError(nc, &nats.Msg{Subject: "x"}, "src", bus.ErrNotParked); err != nil {
		t.Fatal(err)
	}
	if err := bus.Respond(nc, &nats.Msg{Subject: "x", Reply: "reply.1"}, "toolbus/router/r1", bus.TypeAnswerAck, bus.AnswerAck{Accepted: true}); err != nil {
		t.Fatal(err)
	}
	if err := bus.RespondError(nc, &nats.Msg{Subject: "x", Reply: "reply.2"}, "toolbus/router/r1", bus.Errorf(bus.CodeNotParked, "no parked call %s", "s.r.c")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ subject, typ, data string }{
		{"reply.1", bus.TypeAnswerAck, `{"accepted":true}`},
		{"reply.2", bus.TypeError, `{"code":"not_parked","message":"no parked call s.r.c"}`},
	} {
		m, err := sub.NextMsg(bound)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != want.subject || m.Header.Get(bus.HeaderContentType) != bus.ContentTypeEvent {
			t.Fatalf("message on %s, headers %v", m.Subject, m.Header)
		}
		e, err := bus.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		if e.Type != want.typ || string(e.Data) != want.data || e.Source != "toolbus/router/r1" || e.ID == "" || e.Time == "" {
			t.Fatalf("event %+v data %s", e, e.Data)
		}
		if want.typ == bus.TypeError {
			var be bus.Error
			if err := e.DataAs(&be); err != nil || !errors.Is(&be, bus.ErrNotParked) {
				t.Fatalf("error data %s: %v", e.Data, err)
			}
		}
	}
	if n, _, _ := sub.Pending(); n != 0 {
		t.Fatalf("%d messages published without a reply subject", n)
	}
}

func TestPublishTraceHeaders(t *testing.T) {
	e, err := bus.NewEvent(bus.TypeCallResult, "src", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.TraceParent, e.TraceState = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v"
	var got *nats.Msg
	if err := bus.Publish(publisherFunc(func(m *nats.Msg) error { got = m; return nil }), "subj", e); err != nil {
		t.Fatal(err)
	}
	if got.Subject != "subj" || got.Header.Get("traceparent") != e.TraceParent || got.Header.Get("tracestate") != "k=v" {
		t.Fatalf("message %+v", got)
	}
	// A tracestate without a traceparent is not sent as a header.
	e.TraceParent = ""
	m, _ := e.Msg("subj")
	if m.Header.Get("tracestate") != "" {
		t.Fatal("tracestate header without traceparent")
	}
	// Publishing fails when the data is not JSON.
	e.Data = []byte("{")
	if err := bus.Publish(publisherFunc(func(*nats.Msg) error { t.Fatal("published"); return nil }), "subj", e); err == nil {
		t.Fatal("an event whose data is not JSON was published")
	}
}

type publisherFunc func(*nats.Msg) error

func (f publisherFunc) PublishMsg(m *nats.Msg) error { return f(m) }

func TestFlush(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	if err := bus.Flush(context.Background(), nc); err != nil {
		t.Fatalf("Flush without a deadline: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	if err := bus.Flush(ctx, nc); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	ended, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if err := bus.Flush(ended, nc); err == nil {
		t.Fatal("Flush with an ended context succeeded")
	}
	nc.Close()
	if err := bus.Flush(context.Background(), nc); err == nil {
		t.Fatal("Flush on a closed connection succeeded")
	}
}

func TestErrorIs(t *testing.T) {
	err := bus.Errorf(bus.CodeAlreadyAnswered, "call %s was already answered", "c1")
	if !errors.Is(err, bus.ErrAlreadyAnswered) || errors.Is(err, bus.ErrNotParked) {
		t.Fatal("Is compares codes")
	}
	wrapped := errors.Join(errors.New("ctx"), err)
	if !errors.Is(wrapped, bus.ErrAlreadyAnswered) {
		t.Fatal("Is through a wrapper")
	}
	if err.Error() != "already_answered: call c1 was already answered" || bus.ErrInternal.Error() != "internal" {
		t.Fatalf("texts %q %q", err.Error(), bus.ErrInternal.Error())
	}
	if errors.Is(err, errors.New("already_answered")) {
		t.Fatal("matched a plain error")
	}
}

// TestMsgHeaderIsOwn: a header written on one message (jetstream.PublishMsg
// adds Nats-Msg-Id) must not appear on any other.
func TestMsgHeaderIsOwn(t *testing.T) {
	e, err := bus.NewEvent(bus.TypeCallResult, "test", map[string]int{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Msg("subj")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(nats.MsgIdHdr, "one")
	var got *nats.Msg
	if err := bus.Publish(publisherFunc(func(m *nats.Msg) error { got = m; return nil }), "subj", e); err != nil {
		t.Fatal(err)
	}
	if id := got.Header.Get(nats.MsgIdHdr); id != "" {
		t.Fatalf("a published event carries %s %q, written on another message's header", nats.MsgIdHdr, id)
	}
	m2, _ := e.Msg("subj")
	if id := m2.Header.Get(nats.MsgIdHdr); id != "" || m2.Header.Get("content-type") != bus.ContentTypeEvent {
		t.Fatalf("second Msg header %v", m2.Header)
	}
}
