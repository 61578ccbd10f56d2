package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/toolbus/toolbus/bench"
)

// runBench measures toolbus against raw NATS on an embedded server of its
// own (it needs no running router).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, _ := newFlagSet("bench", stderr)
	quick := fs.Bool("quick", false, "a short run (well under 30 s)")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	dur := fs.Duration("duration", 0, "length of each measurement (default 3s, 300ms with --quick)")
	sessions := fs.Int("sessions", 0, "sessions for the memory measurement (default 100000, 1000 with --quick)")
	verbose := fs.Bool("v", false, "print progress to stderr")
	cross := fs.Bool("cross-process", false, "the cross-process comparison: nats-server, router, relay forwarder and worker each in its own process (docs/performance.md)")
	runs := fs.Int("runs", 0, "--cross-process: runs on fresh processes (default 3)")
	cpuprofile := fs.String("cpuprofile", "", "--cross-process: FILE for CPU profiles after the last run, at the most callers, at least 10 s each: the router process during read-only calls (FILE), the worker process meanwhile (.worker before the extension), the router during write calls (.write); each split by kind of work in the report")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(fs, "bench takes no arguments")
	}
	if *cross {
		return runCrossBench(ctx, bench.CrossOptions{Quick: *quick, Runs: *runs, Duration: *dur, Sessions: *sessions,
			CPUProfile: *cpuprofile}, *asJSON, *verbose, stdout, stderr)
	}
	if *runs != 0 || *cpuprofile != "" {
		return usageError(fs, "--runs and --cpuprofile go with --cross-process")
	}
	opts := bench.Options{Quick: *quick, Duration: *dur, Sessions: *sessions}
	if *verbose {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		}
	}
	stop := progressLine(stderr, "bench measuring", 0)
	rep, err := bench.Run(ctx, opts)
	stop()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.WriteTable(stdout)
	return nil
}

// runCrossBench runs the cross-process comparison and prints it.
func runCrossBench(ctx context.Context, opts bench.CrossOptions, asJSON, verbose bool, stdout, stderr io.Writer) error {
	if verbose {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		}
	}
	stop := progressLine(stderr, "bench measuring (cross-process)", 0)
	rep, err := bench.RunCross(ctx, opts)
	stop()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.WriteTable(stdout)
	return nil
}
