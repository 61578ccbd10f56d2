package worker

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// BenchmarkServeExec is the worker's own part of one read-only call, the
// part the SDK decides: an exec request in the compact form (as a router
// sends it to this SDK) or the binary form of 1.15, its header as nats.go
// hands it over, read, accepted, run by a typed echo tool and answered in
// its form on a connection, in the calling goroutine. What it leaves out is nats.go's and the kernel's: reading
// the request off the socket and parsing its header, the hand-offs between
// goroutines, the flusher's write. Run it with -benchmem; serve-cpu-ns/op
// is the CPU time of the thread the calls ran on (Linux), which a loaded
// machine inflates far less than ns/op.
func BenchmarkServeExec(b *testing.B) {
	b.Run("compact", func(b *testing.B) { benchServeExec(b, bus.CompactMsg) })
	b.Run("binary", func(b *testing.B) { benchServeExec(b, bus.BinaryMsg) })
}

func benchServeExec(b *testing.B, msgOf func(string, *bus.Event) *nats.Msg) {
	nc := testkit.Connect(b, testkit.RunServer(b))
	w, err := New(nc, Config{ID: "w1"})
	if err != nil {
		b.Fatal(err)
	}
	type in struct {
		Text string `json:"text"`
	}
	if err := Register(w, bus.ToolDef{Name: "echo", Description: "Echo.", ReadOnly: true},
		func(_ context.Context, _ *Call, in in) (string, error) { return in.Text, nil }); err != nil {
		b.Fatal(err)
	}
	t := w.tools[0]
	t.accepted.Store(true)
	t.decide()

	req := bus.ExecRequest{Call: bus.Call{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hello"}`)},
		User: json.RawMessage("null"), Context: json.RawMessage("null"), Attempt: 1}
	e := bus.Head(bus.TypeExec, "toolbus/router/r1")
	e.Data = req.AppendJSON(nil)
	e.SessionID, e.ReplyID, e.ToolCallID = "bench-session-0001", "M3CgXPmzZg1495hoVjoRqG", "c1"
	e.ExpiryTime = bus.FormatExpiry(time.Now().Add(time.Hour))
	m := msgOf(w.subj.Workers.Exec("echo"), &e)
	m.Reply = "_INBOX.bench.nobody"
	// The header as nats.go decodes it: one slice per key, not the
	// encoder's shared array.
	h := nats.Header{}
	for k, vs := range m.Header {
		h[k] = append([]string(nil), vs...)
	}
	m.Header = h

	// The goroutine keeps its thread, so the thread's CPU time is the
	// calls' (and whatever the runtime runs on it meanwhile: assists,
	// allocation), whatever else the machine runs: serve-cpu-ns/op.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, measured := threadCPU()
	for range b.N {
		r := newRequest(&nats.Msg{Subject: m.Subject, Reply: m.Reply, Header: m.Header, Data: m.Data})
		r.err = bus.DecodeHead(&r.m, &r.e)
		w.sem <- struct{}{}
		r.key, r.tracked = w.accept(t, &r.e, r.err)
		r.w, r.t = w, t
		r.run()
	}
	cpu1, _ := threadCPU()
	b.StopTimer()
	if measured {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "serve-cpu-ns/op")
	}
	if err := w.Drain(b.Context()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkProgress is one progress event of a running call: one text
// block published on the session's events subject.
func BenchmarkProgress(b *testing.B) {
	nc := testkit.Connect(b, testkit.RunServer(b))
	w, err := New(nc, Config{ID: "w1"})
	if err != nil {
		b.Fatal(err)
	}
	c := &Call{ID: "c1", Name: "echo", SessionID: "bench-session-0001", ReplyID: "M3CgXPmzZg1495hoVjoRqG", w: w.exec}
	blocks := bus.Text("50% done")
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Progress(blocks...); err != nil {
			b.Fatal(err)
		}
	}
}
