//go:build unix

package builtin

import (
	"os/exec"
	"syscall"
)

// setGroup runs the command in its own process group and makes a cancel
// kill the whole group, so a timeout also ends the command's children.
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
