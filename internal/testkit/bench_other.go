//go:build !unix

package testkit

import "time"

// cpuTime is zero where getrusage is not: cpu-µs/op then says 0.
func cpuTime() time.Duration { return 0 }
