//go:build unix

package bench

import "syscall"

// processGone reports whether no process has the id pid (an exited child
// that was waited for).
func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
