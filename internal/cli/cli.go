// Package cli holds what the long-running commands (cmd/router,
// cmd/toolworker) share: the logging, metrics and tracing flags, and
// setting them up.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/tracing"
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
	shutdown, err := tracing.Setup(ctx, tracing.Config{Endpoint: *o.otlp, Insecure: *o.otlpInsecure, ServiceName: service})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	s.Stop = func() { _ = shutdown(context.Background()) }
	return s, nil
}
