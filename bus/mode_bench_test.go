package bus_test

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// The receiving side of one batch in each mode, from the bytes on the
// wire: structured mode parses the envelope's JSON; binary mode parses
// the NATS header block (as nats.go does on receipt) and reads its ce-
// headers.
func BenchmarkDecodeModes(b *testing.B) {
	e, _ := bus.NewEvent(bus.TypeCallBatch, "agent", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}}})
	e.SessionID, e.TraceParent = "s1", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	b.Run("structured", func(b *testing.B) {
		data, _ := e.Encode()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bus.DecodeStructured(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("binary", func(b *testing.B) {
		m := bus.BinaryMsg("toolbus.call.s1", e)
		hdr := headerBlock(m.Header)
		b.ReportAllocs()
		for b.Loop() {
			h, err := nats.DecodeHeadersMsg(hdr)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := bus.Decode(&nats.Msg{Subject: m.Subject, Header: h, Data: m.Data}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// headerBlock is h as NATS sends it.
func headerBlock(h nats.Header) []byte {
	out := []byte("NATS/1.0\r\n")
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v+"\r\n"...)
		}
	}
	return append(out, "\r\n"...)
}

func BenchmarkDecodeBinaryParts(b *testing.B) {
	e, _ := bus.NewEvent(bus.TypeCallBatch, "agent", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}}})
	e.SessionID, e.TraceParent = "s1", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	m := bus.BinaryMsg("toolbus.call.s1", e)
	hdr := headerBlock(m.Header)
	b.Run("nats-headers", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := nats.DecodeHeadersMsg(hdr); err != nil {
				b.Fatal(err)
			}
		}
	})
	h, _ := nats.DecodeHeadersMsg(hdr)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bus.Decode(&nats.Msg{Subject: m.Subject, Header: h, Data: m.Data}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bus.BinaryMsg("toolbus.call.s1", e)
		}
	})
	b.Run("encode-structured", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Msg("toolbus.call.s1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
