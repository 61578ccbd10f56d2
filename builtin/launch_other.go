//go:build !linux

package builtin

import (
	"context"
	"os/exec"
)

const sandboxSupported = false

func launcherCommand(ctx context.Context, spec sandboxSpec) (*exec.Cmd, func()) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", spec.Command)
	direct(cmd, spec)
	return cmd, func() { killGroup(cmd) }
}

func runLocked(cmd *exec.Cmd) error { return cmd.Run() }

func runSandboxChild() {}

func landlockABI() int { return 0 }
