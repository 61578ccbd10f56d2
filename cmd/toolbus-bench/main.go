// Command toolbus-bench holds toolbus's harnesses: the bench, toolbus
// against raw NATS (docs/performance.md), and the soak, a whole deployment
// under load with faults (docs/operations.md). It is a binary of its own so
// that the operator CLI links neither; `toolbus bench ARGS` and `toolbus
// soak ARGS` run it (docs/router.md "Layout").
//
//	toolbus-bench bench [--quick] [--json]
//	toolbus-bench bench --cross-process [--runs 3] [--cpuprofile FILE]
//	toolbus-bench soak --duration 10m [--json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/toolbus/toolbus/bench"
	"github.com/toolbus/toolbus/internal/cli"
)

func main() {
	bench.RunChild() // a part of `toolbus bench --cross-process` runs here, never returning
	cli.Main("toolbus-bench", run)
}

// run runs the harness args[0] names: bench or soak.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "bench":
			return runBench(ctx, args[1:], stdout, stderr)
		case "soak":
			return runSoak(ctx, args[1:], stdout, stderr)
		}
	}
	return fmt.Errorf("usage: toolbus-bench bench|soak [flags]")
}

// runBench measures toolbus against raw NATS on an embedded server of its
// own (it needs no running router).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("toolbus bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a short run (well under 30 s)")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	dur := fs.Duration("duration", 0, "length of each measurement (default 3s, 300ms with --quick)")
	sessions := fs.Int("sessions", 0, "sessions for the memory measurement (default 100000, 1000 with --quick)")
	verbose := fs.Bool("v", false, "print progress to stderr")
	cross := fs.Bool("cross-process", false, "the cross-process comparison: nats-server, router, relay forwarder and worker each in its own process (docs/performance.md)")
	runs := fs.Int("runs", 0, "--cross-process: runs on fresh processes (default 3)")
	cpuprofile := fs.String("cpuprofile", "", "--cross-process: FILE for CPU profiles after the last run, at the most callers, at least 10 s each: the router process during read-only calls (FILE), the worker process meanwhile (.worker before the extension), the router during write calls (.write); each split by kind of work in the report")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench takes no arguments")
	}
	var rep interface{ WriteTable(io.Writer) }
	var err error
	opts := bench.Options{Quick: *quick, Runs: *runs, Duration: *dur, Sessions: *sessions, CPUProfile: *cpuprofile,
		Logf: progressLogf(stderr, *verbose, "")}
	if *cross {
		rep, err = bench.RunCross(ctx, opts)
	} else if *runs != 0 || *cpuprofile != "" {
		return fmt.Errorf("--runs and --cpuprofile go with --cross-process")
	} else {
		rep, err = bench.Run(ctx, opts)
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	rep.WriteTable(stdout)
	return nil
}

// progressLogf is the logf of -v: timestamped lines on w, after prefix;
// without verbose it discards them.
func progressLogf(w io.Writer, verbose bool, prefix string) func(format string, args ...any) {
	if !verbose {
		return func(string, ...any) {}
	}
	return func(format string, args ...any) {
		fmt.Fprintf(w, "%s "+prefix+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

// writeJSON prints v as one indented JSON object.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
