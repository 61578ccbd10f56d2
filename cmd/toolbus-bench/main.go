// Command toolbus-bench holds toolbus's harnesses, the bench
// (docs/performance.md) and the soak (docs/operations.md), in a binary of its
// own so the operator CLI links neither; `toolbus bench` and `toolbus soak`
// run it (docs/router.md "Layout").
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/toolbus/toolbus/bench"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/cmd/toolbus-bench/soak"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/natsconn"
)

func main() {
	bench.RunChild() // a part of `toolbus bench` runs here, never returning
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

// runBench runs the cross-process comparison (docs/performance.md) on
// processes of its own (it needs no running router).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("toolbus bench", args, stdout, stderr)
	quick := fs.Bool("quick", false, "a short run (1 s measurements, 10,000 sessions)")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	dur := fs.Duration("duration", 0, "length of each measurement (default 3s, 1s with --quick)")
	sessions := fs.Int("sessions", 0, "sessions for the memory measurement (default 100000, 10000 with --quick; negative skips it)")
	verbose := fs.Bool("v", false, "print progress to stderr")
	fs.Bool("cross-process", true, "accepted for old commands: every run is cross-process")
	runs := fs.Int("runs", 0, "runs on fresh processes (default 3)")
	cpuprofile := fs.String("cpuprofile", "", "FILE for CPU profiles after the last run, at the most callers, at least 10 s each: the router process during read-only calls (FILE), the worker process meanwhile (.worker before the extension), the router during write calls (.write), nats-server during read-only calls at the most and at 16 callers (.nats, .nats-16) and during relayed ones (.nats-relay), the worker and this process (the client) at 16 callers (.worker-16, .client-16), each process's heap at a profile's end (.heap after those); each split by kind of work in the report")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench takes no arguments")
	}
	if *runs < 0 || *dur < 0 {
		return fmt.Errorf("--runs and --duration must not be negative")
	}
	rep, err := bench.Run(ctx, bench.Options{Quick: *quick, Runs: *runs, Duration: *dur, Sessions: *sessions, CPUProfile: *cpuprofile,
		Logf: progressLogf(stderr, *verbose, "")})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return printReport(stdout, rep, *asJSON)
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

// printReport prints rep as one indented JSON object, or as its tables.
func printReport(w io.Writer, rep interface{ WriteTable(io.Writer) }, asJSON bool) error {
	if !asJSON {
		rep.WriteTable(w)
		return nil
	}
	return cli.WriteJSON(w, rep)
}

// runSoak is toolbus soak: flags in, package soak runs, the report out.
func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("toolbus soak", args, stdout, stderr)
	o := &soak.Options{}
	var keep, asJSON bool
	fs.StringVar(&o.NATSURL, "nats", "", "NATS URL(s) to run the deployment on; empty starts a 3-node cluster in this process")
	fs.StringVar(&o.Prefix, "prefix", "", "subject prefix of the soak's deployment (default soak<random>, so it shares nothing)")
	fs.DurationVar(&o.Duration, "duration", time.Minute, "how long agents send new batches (then the batches under way finish)")
	fs.DurationVar(&o.FaultEvery, "fault-every", 0, "time between faults (default duration/3, at most 30s; negative: no faults)")
	fs.DurationVar(&o.Down, "down", 2*time.Second, "how long a killed process stays down (a NATS node twice that)")
	fs.DurationVar(&o.Grace, "grace", time.Minute, "how long past a batch's expirytime its agent still waits and re-sends")
	fs.DurationVar(&o.BatchDeadline, "batch-deadline", time.Minute, "each batch's expirytime, from its first send")
	fs.IntVar(&o.Agents, "agents", 8, "agents sending batches at once")
	fs.IntVar(&o.Replicas, "replicas", 0, "JetStream replicas (default 3 on the soak's own cluster, 1 with --nats)")
	fs.StringVar(&o.Bin, "bin", "", "directory holding the router and toolworker executables")
	fs.BoolVar(&keep, "keep", false, "keep the work directory (process logs, effects file) even when nothing went wrong")
	fs.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	verbose := fs.Bool("v", false, "print progress to stderr")
	o.Conn = natsconn.FromEnv()
	o.Conn.RegisterAuthFlags(fs)
	fs.Usage = cli.GroupedUsage(fs, "usage: toolbus soak [flags]\n\n"+soak.Help+"\n", nil, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("soak takes no arguments, got %q", fs.Arg(0))
	}
	var err error
	switch {
	case o.Duration <= 0:
		return fmt.Errorf("--duration must be positive, got %v", o.Duration)
	case o.Agents < 1:
		return fmt.Errorf("--agents must be at least 1, got %d", o.Agents)
	case o.Grace <= 0 || o.BatchDeadline <= 0:
		return fmt.Errorf("--grace and --batch-deadline must be positive")
	case o.Replicas < 0 || o.Replicas > 5:
		return fmt.Errorf("--replicas must be 1 to 5, got %d", o.Replicas)
	case o.Down < 0:
		return fmt.Errorf("--down must not be negative")
	}
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("soak%06x", rand.Uint32()&0xffffff)
	} else if !bus.ValidName(o.Prefix) {
		return fmt.Errorf("--prefix %q must match ^[A-Za-z0-9_-]{1,64}$", o.Prefix)
	}
	if o.Replicas == 0 {
		o.Replicas = 3
		if o.NATSURL != "" {
			o.Replicas = 1
		}
	}
	o.FaultEvery = cmp.Or(o.FaultEvery, min(30*time.Second, o.Duration/3))
	logf := progressLogf(stderr, *verbose, "soak: ")
	if o.Dir, err = os.MkdirTemp("", "toolbus-soak-*"); err != nil {
		return err
	}
	stop := func() {}
	if !*verbose {
		stop = progressLine(stderr, "soak running", o.Duration)
	}
	rep, err := soak.Run(ctx, o, logf)
	stop()
	if err != nil {
		fmt.Fprintf(stderr, "soak: work directory kept: %s\n", o.Dir)
		return err
	}
	failed := rep.Lost > 0 || rep.Duplicated > 0 || rep.ParkedLost > 0 || rep.WrongResults > 0 || rep.BatchDoneMissing > 0
	if failed || keep {
		rep.WorkDir = o.Dir
	} else {
		_ = os.RemoveAll(o.Dir)
	}
	if err := printReport(stdout, rep, asJSON); err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("soak: %d lost, %d duplicated, %d parked lost, %d wrong results, %d batches without batch.done (logs in %s)",
			rep.Lost, rep.Duplicated, rep.ParkedLost, rep.WrongResults, rep.BatchDoneMissing, o.Dir)
	}
	return nil
}

// progressLine prints "<what>: <elapsed> of <total>" while a long command
// runs: rewritten every 2 s on a terminal, a plain line every 30 s into a
// file or pipe; nothing to other writers. total may be zero.
func progressLine(w io.Writer, what string, total time.Duration) (stop func()) {
	f, ok := w.(*os.File)
	if !ok {
		return func() {}
	}
	every, before, after := 2*time.Second, "\r\033[K", "" // before clears the line
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		every, before, after = 30*time.Second, "", "\n" // a line every 30 s, none to clear
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		life.Every(ctx, every, func(time.Time) {
			line := fmt.Sprintf("%s: %s", what, time.Since(start).Round(time.Second))
			if total > 0 {
				line += fmt.Sprintf(" of about %s", total.Round(time.Second))
			}
			fmt.Fprint(f, before+line+after)
		})
		fmt.Fprint(f, before)
	}()
	return func() { cancel(); <-ended }
}
