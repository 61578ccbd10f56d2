// Package tracing carries W3C trace context across the bus and starts
// "execute_tool <name>" spans; off (free) until Enable. It holds only the
// OpenTelemetry API, so the worker SDK links no exporter.
package tracing

import (
	"context"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

const instrumentation = "github.com/toolbus/toolbus"

var propagator = propagation.TraceContext{}

// Extract returns ctx carrying the remote span context of traceparent.
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" || !enabled.Load() {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// Bounds of what Bound passes on: a traceparent of a later version than 00
// (which is 55 characters) may add fields; 512 characters of tracestate are
// what W3C Trace Context asks every vendor to pass on.
const (
	maxTraceParent = 256
	maxTraceState  = 512
)

// Bound returns the trace context the bus passes on for what a caller sent:
// none for a traceparent W3C Trace Context does not read (nor its
// tracestate), and no tracestate past maxTraceState. Calls are never refused
// for their trace context (docs/protocol.md 1, 1.21).
func Bound(traceparent, tracestate string) (string, string) {
	if !validParent(traceparent) {
		return "", ""
	}
	if len(tracestate) > maxTraceState {
		tracestate = ""
	}
	return traceparent, tracestate
}

// validParent reports whether W3C Trace Context reads tp, at most
// maxTraceParent long: version-traceid-parentid-flags in lower-case hex
// (version ff invalid, 00 exactly so, a later one perhaps with more after
// a dash), neither id all zeros.
func validParent(tp string) bool {
	if len(tp) < 55 || len(tp) > maxTraceParent || tp[:2] == "ff" || tp[:2] == "00" && len(tp) != 55 || len(tp) > 55 && tp[55] != '-' {
		return false
	}
	for i := range 55 {
		if i == 2 || i == 35 || i == 52 {
			if tp[i] != '-' {
				return false
			}
		} else if !('0' <= tp[i] && tp[i] <= '9' || 'a' <= tp[i] && tp[i] <= 'f') {
			return false
		}
	}
	return strings.Trim(tp[3:35], "0") != "" && strings.Trim(tp[36:52], "0") != ""
}

// Inject returns the traceparent and tracestate of ctx's span, or the given
// fallbacks when ctx has no valid span (tracing off: pass through what came in).
func Inject(ctx context.Context, fallbackParent, fallbackState string) (string, string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return fallbackParent, fallbackState
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// enabled is set once a provider is installed; until then StartTool costs
// nothing and traceparent passes through unchanged.
var enabled atomic.Bool

// Enable installs tp as the global tracer provider (internal/cli calls it; tests
// call it with an in-memory exporter).
func Enable(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	enabled.Store(true)
}

// StartTool starts the span of one tool execution on this hop. With tracing
// off it returns ctx and its (non-recording) span.
func StartTool(ctx context.Context, kind trace.SpanKind, tool, callID, session string) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	tr := otel.GetTracerProvider().Tracer(instrumentation)
	return tr.Start(ctx, "execute_tool "+tool, trace.WithSpanKind(kind), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", tool),
		attribute.String("gen_ai.tool.call.id", callID),
		attribute.String("gen_ai.conversation.id", session),
	))
}

// Disable goes back to the no-op provider (for tests).
func Disable() {
	enabled.Store(false)
	otel.SetTracerProvider(noop.NewTracerProvider())
}
