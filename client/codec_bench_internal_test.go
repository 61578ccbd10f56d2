package client

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// The SDK's own work per call, off the network (issue 27): the batch
// encoded and handed to a publish as Call does, and a router's reply
// decoded as exchange does.
//
//	go test -run '^$' -bench CallCodec -benchmem ./client/
func BenchmarkCallCodec(b *testing.B) {
	rq := &requester{subj: bus.NewSubjects(""), source: "toolbus/client"}
	batch := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: []byte(`{"text":"hello"}`)}}}
	b.Run("encode", func(b *testing.B) {
		var n int
		count := func(m *nats.Msg) error { n += len(m.Data) + len(m.Header); return nil }
		for b.Loop() {
			buf := batchBufs.Get().(*[]byte)
			bt := batch
			e, err := rq.batchIn("bench-session-0001", &bt, nil, (*buf)[:0])
			if err != nil {
				b.Fatal(err)
			}
			*buf = e.Data[:0]
			if err := bus.SendTrusted("toolbus.call.bench-session-0001", &e, "", count); err != nil {
				b.Fatal(err)
			}
			batchBufs.Put(buf)
		}
	})
	e := bus.Head(bus.TypeCallReply, "toolbus/router/r1")
	e.SessionID, e.ReplyID = "bench-session-0001", "M3CgXPmzZg1495hoVjoRqG"
	e.Data = []byte(`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"hello"}]}],"parked":[]}`)
	var reply *nats.Msg
	if err := bus.SendTrusted("", &e, "", func(m *nats.Msg) error {
		reply = &nats.Msg{Header: m.Header, Data: append([]byte(nil), m.Data...)}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			var re bus.Event
			if err := bus.DecodeHeadView(reply, &re); err != nil {
				b.Fatal(err)
			}
			r := new(bus.Reply)
			if err := r.FromEvent(&re); err != nil || len(r.Results) != 1 {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodehead", func(b *testing.B) {
		for b.Loop() {
			var re bus.Event
			if err := bus.DecodeHeadView(reply, &re); err != nil {
				b.Fatal(err)
			}
		}
	})
}
