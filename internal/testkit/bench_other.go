//go:build !unix

package testkit

import "time"

// ProcessCPU is zero where getrusage is not: cpu-µs/op then says 0.
func ProcessCPU() time.Duration { return 0 }
