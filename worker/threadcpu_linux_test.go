package worker

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time of the calling thread so far (getrusage's
// RUSAGE_THREAD); the caller locks its goroutine to the thread.
func threadCPU() (time.Duration, bool) {
	const rusageThread = 1
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
