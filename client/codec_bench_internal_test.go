package client

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// The SDK's own work per call, off the network (issue 27): the batch
// encoded and handed to a publish as Call does, and a router's reply
// decoded as exchange does. Each is a function of its own, so that
// callgrind can count its instructions alone (docs/performance.md,
// session 25):
//
//	go test -run '^$' -bench CallCodec -benchmem ./client/
func BenchmarkCallCodec(b *testing.B) {
	rq := &requester{subj: bus.NewSubjects(""), source: "toolbus/client"}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if err := codecEncode(rq); err != nil {
				b.Fatal(err)
			}
		}
	})
	reply := codecReply(b)
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if r, err := codecDecode(reply); err != nil || len(r.Results) != 1 {
				b.Fatal(r, err)
			}
		}
	})
}

// codecBatch is the benchmarks' batch: one read-only echo.
var codecBatch = bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: []byte(`{"text":"hello"}`)}}}

// codecEncode encodes codecBatch as Call does and hands it to a publish
// that reads it.
//
//go:noinline
func codecEncode(rq *requester) error {
	buf := batchBufs.Get().(*[]byte)
	defer batchBufs.Put(buf)
	b := codecBatch
	var e bus.Event
	if err := rq.batchIn("bench-session-0001", &b, nil, (*buf)[:0], &e); err != nil {
		return err
	}
	*buf = e.Data[:0]
	return bus.SendTrusted("toolbus.call.bench-session-0001", &e, "", func(m *nats.Msg) error {
		if len(m.Data) == 0 || len(m.Header) == 0 {
			return bus.Errorf(bus.CodeInternal, "nothing sent")
		}
		return nil
	})
}

// codecReply is a router's reply to codecBatch: one success.
func codecReply(b *testing.B) *nats.Msg {
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
	return reply
}

// codecDecode decodes a reply as exchange does for Call.
//
//go:noinline
func codecDecode(m *nats.Msg) (*bus.Reply, error) {
	var e bus.Event
	if r, err := bus.DecodeReplyView(m, &e, true); err != nil || r != nil {
		return r, err
	}
	r := new(bus.Reply)
	return r, r.FromEvent(&e)
}
