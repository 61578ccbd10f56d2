package embedded

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/tracing"
	"github.com/toolbus/toolbus/worker"
)

func TestTracePropagatesAgentRouterWorker(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tracing.Enable(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(tracing.Disable)

	e := newEnv(t, 1)
	var workerParent string
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "traced", ReadOnly: true}, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			workerParent = trace.SpanContextFromContext(ctx).SpanID().String()
			return textResult("ok"), nil
		})
	})
	e.waitLive("traced")
	const agentTrace, agentSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	e.call(t, "s1", []bus.Call{{ID: "c1", Name: "traced"}}, client.WithTraceParent("00-"+agentTrace+"-"+agentSpan+"-01"))

	var routerSpan, workerSpan tracetest.SpanStub
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		for _, s := range exp.GetSpans() {
			switch s.SpanKind {
			case trace.SpanKindClient:
				routerSpan = s
			case trace.SpanKindServer:
				workerSpan = s
			}
		}
		if !routerSpan.SpanContext.IsValid() || !workerSpan.SpanContext.IsValid() {
			return context.DeadlineExceeded
		}
		return nil
	})
	if routerSpan.Name != "execute_tool traced" || workerSpan.Name != "execute_tool traced" {
		t.Fatalf("span names %q %q", routerSpan.Name, workerSpan.Name)
	}
	if routerSpan.SpanContext.TraceID().String() != agentTrace || workerSpan.SpanContext.TraceID().String() != agentTrace {
		t.Fatal("spans are not in the agent's trace")
	}
	if routerSpan.Parent.SpanID().String() != agentSpan || !routerSpan.Parent.IsRemote() {
		t.Fatalf("router span parent %s, want the agent's %s", routerSpan.Parent.SpanID(), agentSpan)
	}
	if workerSpan.Parent.SpanID() != routerSpan.SpanContext.SpanID() || !workerSpan.Parent.IsRemote() {
		t.Fatalf("worker span parent %s, want the router span %s", workerSpan.Parent.SpanID(), routerSpan.SpanContext.SpanID())
	}
	if workerParent != workerSpan.SpanContext.SpanID().String() {
		t.Fatal("the tool's context does not carry the worker span")
	}
	attrs := map[string]string{}
	for _, a := range workerSpan.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["gen_ai.tool.name"] != "traced" || attrs["gen_ai.tool.call.id"] != "c1" || attrs["gen_ai.operation.name"] != "execute_tool" {
		t.Fatalf("attributes %v", attrs)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := startEnv(t, 1, false, router.Config{Metrics: reg})
	wreg := prometheus.NewRegistry()
	_, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{
		Config: worker.Config{Observer: metrics.NewWorker(wreg, worker.DefaultMaxConcurrent)},
		Setup: func(w *worker.Worker) error {
			handle(t, w, bus.ToolDef{Name: "m", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("ok"), nil })
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	e.waitLive("m")
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	e.call(t, "s1", []bus.Call{{ID: "c1", Name: "m"}, {ID: "c2", Name: "nope"}})
	if _, err := e.client.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "ext"}}}); err != nil {
		t.Fatal(err)
	}
	_, _ = e.client.Call(t.Context(), "s1", bus.Batch{})

	want := map[string]float64{
		`toolbus_router_calls_total{state="success",tool="m"}`:     1,
		`toolbus_router_calls_total{state="error",tool="unknown"}`: 1,
		`toolbus_router_batches_total`:                             2,
		`toolbus_router_parked_total{kind="external"}`:             1,
		`toolbus_parked_calls`:                                     1,
		`toolbus_live_workers{tool="m"}`:                           1,
		`toolbus_router_rejected_total{code="bad_request"}`:        1,
	}
	got := gather(t, reg)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if got[`toolbus_router_call_duration_seconds_count{tool="m"}`] != 1 {
		t.Errorf("latency histogram: %v", got)
	}
	if n := testutil.CollectAndCount(reg, "toolbus_sessions"); n != 1 {
		t.Errorf("sessions gauge missing")
	}
	wgot := gather(t, wreg)
	if wgot[`toolbus_worker_calls_total{state="success",tool="m"}`] != 1 || wgot[`toolbus_worker_slots`] != 64 {
		t.Errorf("worker metrics %v", wgot)
	}
}

// gather flattens a registry into "name{labels}" → value (histograms as _count).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			slices.Sort(labels)
			key := mf.GetName()
			if len(labels) > 0 {
				key += "{" + joinComma(labels) + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[mf.GetName()+"_count"+key[len(mf.GetName()):]] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func joinComma(xs []string) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += ","
		}
		s += x
	}
	return s
}

func TestWorkersAreMicroServices(t *testing.T) {
	e := newEnv(t, 1)
	w := e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "alpha", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("a"), nil })
		handle(t, w, bus.ToolDef{Name: "beta", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("b"), nil })
	})
	e.waitLive("alpha", "beta")
	e.call(t, "s1", []bus.Call{{ID: "c1", Name: "alpha"}})
	subj, err := micro.ControlSubject(micro.InfoVerb, "toolbus-worker", "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.nc.Request(subj, nil, bound)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(resp.Data, &info); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ep := range info.Endpoints {
		names = append(names, ep.Name+"@"+ep.Subject+"#"+ep.QueueGroup)
	}
	slices.Sort(names)
	if want := []string{"alpha@toolbus.exec.alpha#toolbus-exec-alpha", "beta@toolbus.exec.beta#toolbus-exec-beta"}; !slices.Equal(names, want) || info.Metadata["worker"] != w.ID() {
		t.Fatalf("micro info %+v", info)
	}
	subj, _ = micro.ControlSubject(micro.StatsVerb, "toolbus-worker", "")
	resp, err = e.nc.Request(subj, nil, bound)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(resp.Data, &stats); err != nil {
		t.Fatal(err)
	}
	for _, ep := range stats.Endpoints {
		if ep.Name == "alpha" && ep.NumRequests != 1 {
			t.Fatalf("alpha stats %+v", ep)
		}
	}
}
