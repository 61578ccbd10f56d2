//go:build unix

package builtin

import (
	"os"
	"os/exec"
	"syscall"
)

// direct runs the command in its own process group, as spec's user when
// it names one, and makes a cancel kill the whole group, so a timeout
// also ends the command's children (not those that left the group: the
// launcher is what catches those).
func direct(cmd *exec.Cmd, spec sandboxSpec) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.UID >= 0 {
		groups := make([]uint32, 0, len(spec.Groups))
		for _, g := range spec.Groups {
			groups = append(groups, uint32(g))
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(spec.UID), Gid: uint32(spec.GID), Groups: groups}
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// killGroup ends what is left of the command's process group once the
// command has ended (its & children that stayed in the group).
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// fileOwner returns fi's owner and group.
func fileOwner(fi os.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
