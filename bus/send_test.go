package bus_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// Send puts on the wire what Msg makes of the event (the same bytes, the
// same header), with the Nats-Msg-Id it is given; the pooled buffers it
// reuses never leak one message into the next.
func TestSendIsMsg(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	sub, err := nc.SubscribeSync("ev.>")
	if err != nil {
		t.Fatal(err)
	}
	events := []struct {
		msgID string
		data  string
		trace [2]string
	}{
		{"", `{"results":[]}`, [2]string{}},
		{"id-1", `{"results":[{"id":"c1","state":"success"}]}`, [2]string{}},
		{"", `{"a":"ü\u0000"}`, [2]string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""}},
		{"id-2", `[1,2,3]`, [2]string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v"}},
		{"", `{}`, [2]string{}}, // after a message with every header: none left over
	}
	for i, tc := range events {
		e, err := bus.NewEvent(bus.TypeBatchDone, "toolbus/router/r1", json.RawMessage(tc.data))
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.ReplyID, e.TraceParent, e.TraceState = "s1", "r\"1", tc.trace[0], tc.trace[1]
		if err := bus.SendWith("ev.s1", e, tc.msgID, nc.PublishMsg); err != nil {
			t.Fatal(err)
		}
		got, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		want, err := e.Msg("ev.s1")
		if err != nil {
			t.Fatal(err)
		}
		if tc.msgID != "" {
			want.Header.Set(jetstream.MsgIDHeader, tc.msgID)
		}
		if string(got.Data) != string(want.Data) {
			t.Errorf("event %d: sent %s, Msg makes %s", i, got.Data, want.Data)
		}
		if !maps.EqualFunc(got.Header, want.Header, func(a, b []string) bool { return len(a) == 1 && len(b) == 1 && a[0] == b[0] }) {
			t.Errorf("event %d: header %v, Msg makes %v", i, got.Header, want.Header)
		}
	}
	bad := &bus.Event{SpecVersion: bus.SpecVersion, ID: "x", Source: "s", Type: "t", Data: json.RawMessage(`{`)}
	if err := bus.SendWith("ev.s1", bad, "", nc.PublishMsg); err == nil {
		t.Error("data that is not JSON was sent")
	}
	ok := &bus.Event{SpecVersion: bus.SpecVersion, ID: "after", Source: "s", Type: "t"}
	if err := bus.SendWith("ev.s1", ok, "", nc.PublishMsg); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || !json.Valid(m.Data) || string(m.Data) != `{"specversion":"1.0","id":"after","source":"s","type":"t"}` {
		t.Errorf("after a refused send got %s, %v", m.Data, err) // the refused one was not sent
	}
}

// WithBinaryMsg reuses its header for events of one shape and rebuilds it
// for another: every message decodes to its own event, whatever came before.
func TestWithBinaryMsgShapes(t *testing.T) {
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var evs []*bus.Event
	for i, shape := range []struct{ subject, trace, state, expiry string }{
		{"", "", "", "2030-01-01T00:00:00Z"}, {"", "", "", "2030-01-01T00:00:01Z"}, {"c1", tp, "k=v", ""},
		{"c 3", tp, "", ""}, {"", "", "", "2030-01-01T00:00:02Z"}, {"c%2", "", "", ""}, {"", "", "", "2030-01-01T00:00:03Z"},
	} {
		e, err := bus.NewEvent(bus.TypeExec, "toolbus/router/r 1", json.RawMessage(`{"n":`+string(rune('0'+i))+`}`))
		if err != nil {
			t.Fatal(err)
		}
		e.Subject, e.TraceParent, e.TraceState, e.ExpiryTime = shape.subject, shape.trace, shape.state, shape.expiry
		e.SessionID, e.ReplyID, e.ToolCallID = "s1", "r1", "c1"
		evs = append(evs, e, e) // each shape twice in a row: the second reuses the header
	}
	for i, e := range evs {
		bus.WithBinaryMsg("x", e, false, func(m *nats.Msg) {
			got, err := bus.Decode(m)
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			bm := bus.BinaryMsg("", e)
			h, body := bm.Header, bm.Data
			if !maps.EqualFunc(m.Header, h, slices.Equal) || string(m.Data) != string(body) {
				t.Fatalf("event %d: header %v, BinaryMsg makes %v", i, m.Header, h)
			}
			if got.ID != e.ID || got.Subject != e.Subject || got.TraceParent != e.TraceParent || got.TraceState != e.TraceState || got.ExpiryTime != e.ExpiryTime {
				t.Fatalf("event %d: decoded %+v, sent %+v", i, got, e)
			}
		})
	}
}

// SendWith checks the data, SendTrusted does not; both hand send the
// message Send publishes, with the reply subject send sets.
func TestSendWithAndTrusted(t *testing.T) {
	for _, tc := range []struct {
		data    string
		trusted bool
		ok      bool
	}{
		{`{"a":1}`, false, true},
		{`{"a":1}`, true, true},
		{`{"a":`, false, false},
		{`{"a":`, true, true},
	} {
		e := bus.Head(bus.TypeCallBatch, "agent")
		e.Data = json.RawMessage(tc.data)
		var got *nats.Msg
		send := func(m *nats.Msg) error {
			m.Reply = "r"
			c := *m
			c.Data = slices.Clone(m.Data)
			got = &c
			return nil
		}
		var err error
		if tc.trusted {
			err = bus.SendTrusted("s", &e, "", send)
		} else {
			err = bus.SendWith("s", &e, "", send)
		}
		if (err == nil) != tc.ok {
			t.Fatalf("%s trusted %v: %v", tc.data, tc.trusted, err)
		}
		if err != nil {
			continue
		}
		if got.Subject != "s" || got.Reply != "r" || !strings.Contains(string(got.Data), `"data":`+tc.data+`}`) {
			t.Fatalf("sent %s to %s, reply %s", got.Data, got.Subject, got.Reply)
		}
	}
}
