//go:build !linux

package worker

import "time"

// threadCPU is not measured where RUSAGE_THREAD is missing.
func threadCPU() (time.Duration, bool) { return 0, false }
