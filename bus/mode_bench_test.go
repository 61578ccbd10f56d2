package bus_test

import (
	"bytes"
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

// headerBlock is h as nats.go writes it on the wire (Msg.headerBytes).
func headerBlock(h nats.Header) []byte {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	var b bytes.Buffer
	b.Grow(n)
	b.WriteString("NATS/1.0\r\n")
	for k, vs := range h {
		for _, v := range vs {
			b.WriteString(k)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteString("\r\n")
		}
	}
	b.WriteString("\r\n")
	return b.Bytes()
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

// One exec request's whole trip through the codecs in each mode: the
// sender's encoding into the bytes NATS sends (nats.go writes the header
// block), the receiver's decoding from them.
func BenchmarkExecRoundTripModes(b *testing.B) {
	req := bus.ExecRequest{Call: bus.Call{ID: "toolu_01", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)},
		User: json.RawMessage(`"alice"`), Context: json.RawMessage(`{"tenant":"acme"}`), Attempt: 1}
	e, _ := bus.NewEvent(bus.TypeExec, "toolbus/router/r1", json.RawMessage(req.AppendJSON(nil)))
	e.SessionID, e.ReplyID, e.ToolCallID, e.ExpiryTime = "s1", "turn-2", "toolu_01", "2026-12-01T10:46:34.452201362Z"
	b.Run("structured", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m, err := e.Msg("toolbus.exec.get_weather")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := bus.Decode(&nats.Msg{Subject: m.Subject, Data: m.Data}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := bus.BinaryMsg("toolbus.exec.get_weather", e)
			h, err := nats.DecodeHeadersMsg(headerBlock(m.Header))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := bus.Decode(&nats.Msg{Subject: m.Subject, Header: h, Data: m.Data}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
