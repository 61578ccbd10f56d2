package cli

import (
	"cmp"
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolbus/toolbus/tracing"
)

// setupTracing installs a global tracer provider exporting to endpoint
// (host:port) over OTLP/HTTP, plain HTTP when insecure, for the service
// name. It returns a shutdown function that flushes pending spans. With an
// empty endpoint it does nothing and tracing stays off. The exporter lives
// here, in the commands, so that the library packages link none.
func setupTracing(ctx context.Context, endpoint string, insecure bool, service string) (func(context.Context) error, error) {
	if endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(endpoint)}
	if insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", cmp.Or(service, "toolbus")))))
	tracing.Enable(tp)
	return tp.Shutdown, nil
}
