package bus_test

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// What a message's headers cost its sender: nats.go serializes a header
// map on every PublishMsg (Msg.headerBytes: a buffer, and a map iteration
// and a value check per header), and has no way to send a header block
// already serialized. The same 300-byte body with no header, the one
// content-type of a reply, the two of a stored batch.done (content-type and
// Nats-Msg-Id), and the router's binary exec (ten). Published to a subject
// nobody takes, over a real connection; the flusher's writes are in the
// figures of every case alike. docs/performance.md, "Session 13".
func BenchmarkPublishHeaders(b *testing.B) {
	nc := testkit.Connect(b, testkit.RunServer(b))
	body := make([]byte, 300)
	for i := range body {
		body[i] = 'a'
	}
	e, err := bus.NewEvent(bus.TypeExec, "toolbus/router/r1", json.RawMessage(`{"call":{"id":"c1","name":"echo","input":{"text":"hi"}},"user":null,"context":null,"attempt":1}`))
	if err != nil {
		b.Fatal(err)
	}
	e.SessionID, e.ReplyID, e.ToolCallID, e.ExpiryTime = "s1", "turn-1", "c1", "2030-01-01T00:00:00.123456789Z"
	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := nc.PublishMsg(&nats.Msg{Subject: "nobody.none", Data: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("content-type", func(b *testing.B) {
		h := nats.Header{bus.HeaderContentType: {bus.ContentTypeEvent}}
		b.ReportAllocs()
		for b.Loop() {
			if err := nc.PublishMsg(&nats.Msg{Subject: "nobody.one", Header: h, Data: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stored", func(b *testing.B) {
		h := nats.Header{bus.HeaderContentType: {bus.ContentTypeEvent}, "Nats-Msg-Id": {"M3CgXPmzZg1495hoVjoRqG"}}
		b.ReportAllocs()
		for b.Loop() {
			if err := nc.PublishMsg(&nats.Msg{Subject: "nobody.two", Header: h, Data: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("binary-exec", func(b *testing.B) {
		m := bus.BinaryMsg("nobody.exec", e)
		m.Data = body
		b.ReportMetric(float64(len(m.Header)), "headers")
		b.ReportAllocs()
		for b.Loop() {
			if err := nc.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// SendWith's cost per event with the headers of a read-only batch's batch.done
// (content type and Nats-Msg-Id), one shape after another as the router
// sends them: the pooled header keeps its keys between messages of one
// shape. docs/performance.md, "Session 13".
func BenchmarkSendStored(b *testing.B) {
	nc := testkit.Connect(b, testkit.RunServer(b))
	e, err := bus.NewEvent(bus.TypeBatchDone, "toolbus/router/r1", json.RawMessage(`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"hi"}]}]}`))
	if err != nil {
		b.Fatal(err)
	}
	e.SessionID, e.ReplyID = "s1", "turn-1"
	b.ReportAllocs()
	for b.Loop() {
		if err := bus.SendWith("nobody.events.s1", e, e.ID, nc.PublishMsg); err != nil {
			b.Fatal(err)
		}
	}
}
