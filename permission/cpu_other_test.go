//go:build !unix

package permission_test

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
