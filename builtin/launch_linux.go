//go:build linux

package builtin

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// sandboxSupported: the launcher exists on this OS.
const sandboxSupported = true

// launcherCommand returns the command that starts spec through the
// sandbox launcher, and what to do once it has ended: close the pipe that
// tells the launcher the router is alive, and kill what is left of its
// process group (should the launcher itself have been killed).
func launcherCommand(ctx context.Context, spec sandboxSpec) (*exec.Cmd, func()) {
	cmd := exec.CommandContext(ctx, "/proc/self/exe", spec.encode())
	cmd.Args[0] = launcherArg0
	pr, pw, err := os.Pipe()
	if err == nil {
		cmd.ExtraFiles = []*os.File{pr}
	}
	// Pdeathsig: a router that dies tells the launcher, which then kills
	// the command's processes (the pipe's EOF says the same).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// A cancel or timeout asks the launcher to stop; it kills every
	// descendant and exits; WaitDelay kills it if it does not.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	return cmd, func() {
		if err == nil {
			pr.Close()
			pw.Close()
		}
		killGroup(cmd)
	}
}

// runLocked runs cmd on a locked OS thread: the parent-death signal fires
// when the thread that started the child ends, so that thread must live
// until the child has.
func runLocked(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Run()
}
