package router

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// BenchmarkRegisterRefusedMaxPayload is the router's CPU for one worker's
// registration of a definition as large as a message of 8 MiB, the max
// payload of test/security's deployment (TestAttackDefinitionsFillListings):
// refused, past registry.MaxDefinition, by the receive path (onRegister);
// cpu-ms/op is the process's (the embedded server's too: it carries only
// the ack here). over-rate is the same registration past its account's
// rate (registry.Rate, session 42): refused before the decode.
//
//	go test -run - -bench RegisterRefusedMaxPayload -benchtime 5x ./router/
func BenchmarkRegisterRefusedMaxPayload(b *testing.B) {
	nc := testkit.Connect(b, testkit.RunServer(b))
	st, err := store.Setup(b.Context(), testkit.JetStream(b, nc), bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	reg := registry.New(st, registry.Config{Heartbeat: time.Minute})
	if err := reg.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = reg.Stop(context.WithoutCancel(b.Context())) })
	w := &wire{nc: nc, subj: bus.NewSubjects(""), source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler), base: b.Context(),
		m: metrics.NewRouter(nil, metrics.RouterSources{})}
	def := bus.ToolDef{Name: "big", Description: strings.Repeat("d", 8<<20-1<<10), External: true,
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
	e, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/big", bus.Register{Worker: "big", Tools: []bus.ToolDef{def}})
	if err != nil {
		b.Fatal(err)
	}
	m, err := e.Msg(w.subj.Workers.Register("big"))
	if err != nil || len(m.Data) > 8<<20 {
		b.Fatal(len(m.Data), err)
	}
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		b.Fatal(err)
	}
	m.Reply = sub.Subject
	spent := registry.NewRate(1)
	spent.Take("", 8)
	for _, c := range []struct {
		name, want string
		rate       *registry.Rate
	}{{"decoded", "bytes encoded", nil}, {"over-rate", "was not read", spent}} {
		b.Run(c.name, func(b *testing.B) {
			x := &registrar{wire: w, reg: reg, rate: c.rate}
			b.SetBytes(int64(len(m.Data)))
			cpu := testkit.ProcessCPU()
			for b.Loop() {
				x.onRegister(m)
				r, err := sub.NextMsg(time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if !strings.Contains(string(r.Data), c.want) {
					b.Fatalf("want %q: %s", c.want, r.Data[:min(len(r.Data), 300)])
				}
			}
			b.ReportMetric(float64(testkit.ProcessCPU()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}
