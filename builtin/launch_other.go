//go:build !linux

package builtin

import "os/exec"

const sandboxSupported = false

// launcherCommand is never called here (sandboxSupported is false).
var launcherCommand = directCommand

func runLocked(cmd *exec.Cmd) error { return cmd.Run() }

func runSandboxChild() {}

func landlockABI() int { return 0 }
