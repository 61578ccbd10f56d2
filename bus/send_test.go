package bus_test

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

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
		if err := bus.Send(nc, "ev.s1", e, tc.msgID); err != nil {
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
	if err := bus.Send(nc, "ev.s1", bad, ""); err == nil {
		t.Error("data that is not JSON was sent")
	}
	ok := &bus.Event{SpecVersion: bus.SpecVersion, ID: "after", Source: "s", Type: "t"}
	if err := bus.Send(nc, "ev.s1", ok, ""); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || !json.Valid(m.Data) || string(m.Data) != `{"specversion":"1.0","id":"after","source":"s","type":"t"}` {
		t.Errorf("after a refused send got %s, %v", m.Data, err) // the refused one was not sent
	}
}
