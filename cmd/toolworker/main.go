// Command toolworker runs a toolbus worker that serves a few example tools:
// word_count, slow_echo and append_note. Start several copies and they share
// the load through their per-tool queue groups.
//
//	toolworker --nats nats://127.0.0.1:4222
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/worker"
)

func main() { cli.Main("toolworker", run) }

// drainTimeout bounds the drain on shutdown.
const drainTimeout = 30 * time.Second

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("toolworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", cli.DefaultNATS(), "NATS server URL; $NATS_URL when set, else nats://127.0.0.1:4222")
	prefix := fs.String("prefix", bus.DefaultPrefix, "subject prefix of the deployment")
	id := fs.String("id", "", "worker instance id (default: random)")
	heartbeat := fs.Duration("heartbeat", bus.DefaultHeartbeat, "registration heartbeat interval; must match the routers'")
	maxConcurrent := fs.Int("max-concurrent", 64, "calls this worker runs at once, across all its tools")
	observe := cli.ObserveFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: toolworker [flags]\n\nServes the example tools %s on a toolbus deployment.\n\nflags:\n", strings.Join(toolNames, ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *maxConcurrent < 1 {
		return fmt.Errorf("--max-concurrent must be at least 1, got %d", *maxConcurrent)
	}
	if *id != "" && !bus.ValidID(*id) {
		return fmt.Errorf("--id %q must match ^[A-Za-z0-9_-]{1,128}$", *id)
	}
	if *heartbeat <= 0 {
		return fmt.Errorf("--heartbeat must be positive, got %v", *heartbeat)
	}
	obs, err := observe.Start(ctx, "toolworker", "toolbus-worker", stdout, stderr)
	if err != nil {
		return err
	}
	defer obs.Stop()
	log, reg := obs.Log, obs.Metrics

	nc, err := nats.Connect(*natsURL, nats.Name("toolbus-worker"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect %s: %w", *natsURL, err)
	}
	defer nc.Close()

	w, err := worker.New(nc, worker.Config{ID: *id, Prefix: *prefix, Heartbeat: *heartbeat,
		MaxConcurrent: *maxConcurrent, Logger: log, Metrics: reg})
	if err != nil {
		return err
	}
	if err := register(w, &notes{}); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "toolworker: worker %s serving %s on %s (prefix %q)\n",
		w.ID(), strings.Join(toolNames, ", "), *natsURL, *prefix)
	select {
	case <-w.Registered():
		log.Info("registered with the routers")
	case <-ctx.Done():
	}
	<-ctx.Done()
	log.Info("shutting down: draining calls in flight")
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	return w.Stop(dctx)
}
