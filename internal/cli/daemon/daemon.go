// Package daemon holds what the long-running commands (router, toolworker)
// share beyond package cli: the logging, metrics and tracing flags and the
// drain on shutdown. The OTLP exporter and SDK are set up here, so that the
// libraries and the operator CLI link none.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/tracing"
	"github.com/toolbus/toolbus/worker"
)

// Observe is the flags -metrics, -otlp, -otlp-insecure and -v.
type Observe struct {
	metricsAddr  *string
	otlp         *string
	otlpInsecure *bool
	verbose      *bool
}

// ObserveFlags defines the observability flags on fs.
func ObserveFlags(fs *flag.FlagSet) *Observe {
	return &Observe{
		metricsAddr:  fs.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464)"),
		otlp:         fs.String("otlp", "", "export OpenTelemetry traces over OTLP/HTTP to host:port (off when empty)"),
		otlpInsecure: fs.Bool("otlp-insecure", true, "use plain HTTP for --otlp"),
		verbose:      fs.Bool("v", false, "log debug messages"),
	}
}

// Started is what Start set up; call Stop on exit.
type Started struct {
	Log     *slog.Logger
	Metrics prometheus.Registerer // nil without -metrics
	// Stop's: the metrics endpoint's shutdown and the traces' flush.
	closeMetrics, flush func(context.Context) error
}

// Stop shuts the metrics endpoint down (it serves until then, through a
// drain) and flushes the traces, side by side, until ctx ends or at most
// DrainTimeout: a scrape that holds the endpoint takes no time from the
// flush (session 39, red team c).
func (s *Started) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, DrainTimeout)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.closeMetrics(ctx) }()
	return errors.Join(s.flush(ctx), <-closed)
}

// Start sets up the logger on stderr, the metrics endpoint (announced on
// stdout as who's) and trace export for service, as the flags say.
func (o *Observe) Start(ctx context.Context, who, service string, stdout, stderr io.Writer) (*Started, error) {
	level := slog.LevelInfo
	if *o.verbose {
		level = slog.LevelDebug
	}
	s := &Started{Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))}
	var err error
	if s.Metrics, s.closeMetrics, err = metrics.Expose(*o.metricsAddr, who, stdout); err != nil {
		return nil, err
	}
	if s.flush, err = setupTracing(ctx, *o.otlp, *o.otlpInsecure, service); err != nil {
		_ = s.closeMetrics(ctx)
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return s, nil
}

// WorkerObserver returns the Prometheus observer of a worker with slots
// calls at once (zero: worker.DefaultMaxConcurrent); nil without -metrics.
func (s *Started) WorkerObserver(slots int) worker.Observer {
	if s.Metrics == nil {
		return nil
	}
	return metrics.NewWorker(s.Metrics, cmp.Or(max(slots, 0), worker.DefaultMaxConcurrent))
}

// DrainTimeout bounds a long-running command's drain on shutdown.
const DrainTimeout = 30 * time.Second

// Drain waits until ctx ends, then runs drains (by what they drain) side
// by side to one deadline, DrainTimeout. A stop by signal is not a
// failure: what the deadline cut off is logged with its count, and a
// re-sent batch recovers it through the ledger.
func (s *Started) Drain(ctx context.Context, drains map[string]func(context.Context) error) {
	<-ctx.Done()
	s.Log.Info("shutting down: draining work in flight", "deadline", DrainTimeout)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DrainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for what, drain := range drains {
		wg.Go(func() {
			if err := drain(dctx); err != nil {
				s.Log.Warn(what+": drain deadline passed", "err", err)
			}
		})
	}
	wg.Wait()
}

var _ worker.Observer = (*metrics.Worker)(nil)
var _ worker.RejectObserver = (*metrics.Worker)(nil)
var _ worker.BusyObserver = (*metrics.Worker)(nil)

// setupTracing exports spans over OTLP/HTTP to endpoint ("" : off) and
// returns the flushing shutdown; the exporter lives here so libraries link none.
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
