package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/cmd/toolbus-bench/soak"
	"github.com/toolbus/toolbus/natsconn"
)

// runSoak is toolbus soak: flags in, package soak runs, the report out.
func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("toolbus soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
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
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: toolbus soak [flags]\n\n%s\n\nflags:\n", soak.Help)
		fs.PrintDefaults()
	}
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
	if o.FaultEvery == 0 {
		o.FaultEvery = min(30*time.Second, o.Duration/3)
	}
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
	if asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		rep.Write(stdout)
	}
	if failed {
		return fmt.Errorf("soak: %d lost, %d duplicated, %d parked lost, %d wrong results, %d batches without batch.done (logs in %s)",
			rep.Lost, rep.Duplicated, rep.ParkedLost, rep.WrongResults, rep.BatchDoneMissing, o.Dir)
	}
	return nil
}
