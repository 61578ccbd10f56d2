package bus_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
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
			if _, err := bus.Decode(&nats.Msg{Data: data}); err != nil {
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

// BenchmarkRouterExecWire is the router's share of one exec's wire in each
// form (docs/protocol.md 5.1, 5.2): the request made as requestReply.sendExec
// makes it and published over a real connection to a subject nobody takes
// (nats.go writes its header block), then the worker's result, in the form
// a worker answers that request in, read as execReply reads it from the
// bytes nats.go receives (the header block parsed as nats.go parses it,
// DecodeHead, FromEvent). docs/performance.md, "Session 23".
func BenchmarkRouterExecWire(b *testing.B) {
	nc := testkit.Connect(b, testkit.RunServer(b))
	req := bus.ExecRequest{Call: bus.Call{ID: "toolu_01", Name: "echo", Input: json.RawMessage(`{"text":"hello"}`)},
		User: json.RawMessage(`null`), Context: json.RawMessage(`null`), Attempt: 1}
	exec := bus.Head(bus.TypeExec, "toolbus/router/r1")
	exec.Data = req.AppendJSON(nil)
	exec.SessionID, exec.ReplyID, exec.ToolCallID = "bench-session-0001", "M3CgXPmzZg1495hoVjoRqG", "toolu_01"
	exec.ExpiryTime = "2026-12-05T19:00:00.123456789Z"
	result := bus.Head(bus.TypeExecResult, "toolbus/worker/w1")
	result.Data = []byte(`{"state":"success","output":[{"type":"text","text":"hello"}]}`)
	for _, form := range []string{"structured", "binary", "compact"} {
		b.Run(form, func(b *testing.B) {
			out := result
			var reply *nats.Msg
			switch form {
			case "structured":
				out.SessionID, out.ReplyID, out.ToolCallID = exec.SessionID, exec.ReplyID, exec.ToolCallID
				reply, _ = out.Msg("_INBOX.r.1")
			case "binary":
				out.SessionID, out.ReplyID, out.ToolCallID = exec.SessionID, exec.ReplyID, exec.ToolCallID
				reply = bus.BinaryMsg("_INBOX.r.1", &out)
			default:
				reply = bus.CompactMsg("_INBOX.r.1", &out)
			}
			hdr := headerBlock(reply.Header)
			b.ReportMetric(float64(len(reply.Header)), "result-headers")
			b.ReportAllocs()
			for b.Loop() {
				var err error
				send := func(m *nats.Msg) { err = nc.PublishMsg(m) }
				if form == "structured" {
					var m *nats.Msg
					if m, err = exec.Msg("nobody.exec.echo"); err == nil {
						send(m)
					}
				} else {
					bus.WithBinaryMsg("nobody.exec.echo", &exec, form == "compact", send)
				}
				if err != nil {
					b.Fatal(err)
				}
				h, err := nats.DecodeHeadersMsg(hdr)
				if err != nil {
					b.Fatal(err)
				}
				var e bus.Event
				var xr bus.ExecResult
				if err := bus.DecodeHead(&nats.Msg{Subject: reply.Subject, Header: h, Data: reply.Data}, &e); err != nil || xr.FromEvent(&e) != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
