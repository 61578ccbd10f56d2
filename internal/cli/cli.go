// Package cli holds what the commands share: main's signal handling and
// exit, and, for the long-running ones (cmd/router,
// cmd/toolworker), the logging, metrics and tracing flags and their setup.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/metrics"
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

// Started is what Start set up. Stop flushes the traces; call it on exit.
type Started struct {
	Log     *slog.Logger
	Metrics prometheus.Registerer // nil without -metrics
	Stop    func()
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
	if s.Metrics, err = metrics.Expose(ctx, *o.metricsAddr, who, stdout); err != nil {
		return nil, err
	}
	shutdown, err := setupTracing(ctx, *o.otlp, *o.otlpInsecure, service)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	s.Stop = func() { _ = shutdown(context.Background()) }
	return s, nil
}

// WorkerObserver returns the observer that keeps the Prometheus metrics of
// a worker with slots calls at once (its MaxConcurrent; zero means
// worker.DefaultMaxConcurrent), or nil without -metrics.
func (s *Started) WorkerObserver(slots int) worker.Observer {
	if s.Metrics == nil {
		return nil
	}
	if slots <= 0 {
		slots = worker.DefaultMaxConcurrent
	}
	return metrics.NewWorker(s.Metrics, slots)
}

var _ worker.Observer = (*metrics.Worker)(nil)

// Main runs a command's run function with a context that ends on SIGINT
// or SIGTERM, and exits 1 when it fails (printing the error as name's,
// except for -h).
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, name+":", err)
		}
		os.Exit(1)
	}
}
