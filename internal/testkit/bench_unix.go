//go:build unix

package testkit

import (
	"syscall"
	"time"
)

// ProcessCPU is the process's user and system CPU time so far (zero where
// getrusage fails).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
