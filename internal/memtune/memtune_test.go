package memtune

import (
	"math"
	"runtime/debug"
	"testing"
)

// restore puts the process's collector settings back after a test.
func restore(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(gc)
	t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })
}

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		percent int
		limit   int64
		want    Settings
	}{
		{"defaults", nil, DefaultGCPercent, DefaultMemoryLimit, Settings{GCPercent: 400, MemoryLimit: 256 << 20}},
		{"no limit", nil, 200, 0, Settings{GCPercent: 200, MemoryLimit: math.MaxInt64}},
		{"GOGC from the environment", map[string]string{"GOGC": "150"}, 400, 0, Settings{GCPercent: 150, MemoryLimit: math.MaxInt64, FromEnv: true}},
		{"GOMEMLIMIT from the environment", map[string]string{"GOMEMLIMIT": "64MiB"}, 300, 1 << 30, Settings{GCPercent: 300, MemoryLimit: 64 << 20, FromEnv: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore(t)
			debug.SetMemoryLimit(math.MaxInt64)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			// The runtime read the environment at start; a test sets what
			// it would have read.
			if v, ok := tc.env["GOGC"]; ok && v == "150" {
				debug.SetGCPercent(150)
			}
			if _, ok := tc.env["GOMEMLIMIT"]; ok {
				debug.SetMemoryLimit(64 << 20)
			}
			if got := Apply(tc.percent, tc.limit); got != tc.want {
				t.Fatalf("Apply(%d, %d) = %+v, want %+v", tc.percent, tc.limit, got, tc.want)
			}
		})
	}
}
