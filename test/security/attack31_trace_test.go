package security

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/tracing"
)

// TestAttackTraceStateAmplified (session 31, red team on trace context;
// closed by 1.21's bound): a session agent sends one batch of 64 calls with
// "events": "calls" and a 12 KiB tracestate (any printable ASCII, any
// length: no bound). The router copies the batch's trace context onto every
// exec and every event it publishes for the batch, so the events stream
// stores it in the header and the JSON of each call.result, call.progress
// and batch.done: 3,186,720 bytes for the one batch of about 13 KB, 259
// times the tracestate (measured with the skip removed). The agent fills
// P_EVENTS, whose MaxBytes drops the oldest events of every session first,
// some 250 times faster than its batches' size would.
// W3C Trace Context fixes traceparent at 55 characters (version 00) and
// asks vendors to propagate at least 512 of tracestate; since 1.21 the
// router passes on no tracestate past 512 characters (tracing.Bound), so
// the stored bytes per batch stay within a bound of that order.
func TestAttackTraceStateAmplified(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	js, err := jetstream.New(d.conn("operator").nc)
	must(t, err)
	events, err := js.Stream(testCtx(t), bus.NewSubjects("").Stream(bus.StreamEvents))
	must(t, err)
	before, err := events.Info(testCtx(t))
	must(t, err)
	ts := "k=" + strings.Repeat("v", 12<<10)
	var b bus.Batch
	b.Events = bus.EventsCalls
	for i := range bus.MaxCalls {
		b.Calls = append(b.Calls, bus.Call{ID: fmt.Sprintf("c%d", i), Name: "greet"})
	}
	ac := d.conn("session-s1").client()
	rep, err := ac.Call(testCtx(t), "s1", b, client.WithTraceParent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
		func(e *bus.Event) { e.TraceState = ts })
	must(t, err)
	if len(rep.Results) != bus.MaxCalls {
		t.Fatalf("%d results", len(rep.Results))
	}
	after, err := events.Info(testCtx(t))
	must(t, err)
	grew := after.State.Bytes - before.State.Bytes
	if grew > 8*uint64(len(ts)) {
		t.Fatalf("one batch with a %d-byte tracestate grew the events stream by %d bytes (%d times it)", len(ts), grew, grew/uint64(len(ts)))
	}
}

// TestAttackTraceJoinsAnother (session 31, red team on --otlp: accepted):
// alice's agent (s1) sends a batch under the traceparent of a trace of
// bob's (s3), which it learned. The router parents its span on it, as W3C
// Trace Context has it: alice's spans join bob's trace in the backend. What
// they carry is alice's own: the tool, her call id and session, never an
// input, output, user or context; and bob's spans carry nothing of hers.
func TestAttackTraceJoinsAnother(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tracing.Enable(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(tracing.Disable)
	d := newDeployment(t)
	d.startWorker()
	const victim = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	secret := json.RawMessage(`{"who":"bob-secret-input"}`)
	_, err := d.conn("session-s3").client().Call(testCtx(t), "s3", bus.Batch{Calls: []bus.Call{{ID: "bob1", Name: "greet", Input: secret}}},
		client.WithTraceParent(victim))
	must(t, err)
	_, err = d.conn("session-s1").client().Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "alice1", Name: "greet",
		Input: json.RawMessage(`{"who":"alice-input"}`)}}, Context: json.RawMessage(`{"tenant":"acme"}`)}, client.WithTraceParent(victim))
	must(t, err)
	var spans tracetest.SpanStubs
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error { // a worker ends its span after its reply
		if spans = exp.GetSpans(); len(spans) < 4 { // router and worker, twice
			return fmt.Errorf("%d spans", len(spans))
		}
		return nil
	})
	for _, s := range spans {
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Fatalf("span %s not in the trace named: %s", s.Name, s.SpanContext.TraceID())
		}
		own := map[string]string{"s1": "alice1", "s3": "bob1"}[attrs["gen_ai.conversation.id"]]
		if own == "" || attrs["gen_ai.tool.call.id"] != own || len(attrs) != 4 {
			t.Fatalf("span %s carries %v", s.Name, attrs)
		}
		for _, v := range attrs {
			if strings.Contains(v, "secret") || strings.Contains(v, "input") || strings.Contains(v, "acme") {
				t.Fatalf("span %s carries %q", s.Name, v)
			}
		}
	}
}
