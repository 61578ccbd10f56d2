package main

import (
	"context"
	"fmt"
	"io"
	"os"
	osexec "os/exec"

	"github.com/toolbus/toolbus/internal/cli"
)

// runBench and runSoak run toolbus-bench (cmd/toolbus-bench) with args:
// the harnesses are a binary of their own so that this CLI does not link
// them (docs/router.md "Layout").
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runHarness(ctx, "bench", args, stdout, stderr)
}

func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runHarness(ctx, "soak", args, stdout, stderr)
}

// runHarness runs toolbus-bench's harness name, found next to toolbus, on
// $PATH, or built from the module (go run ./cmd/toolbus bench).
func runHarness(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	tmp, err := os.MkdirTemp("", "toolbus-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	ps, _, err := cli.Helpers(ctx, "", tmp, logf, "toolbus-bench")
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	cmd := osexec.CommandContext(ctx, ps[0], append([]string{name}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// A stop passes on as an interrupt: the harness stops the processes
	// it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	return cmd.Run()
}
