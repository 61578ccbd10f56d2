// Package memtune sets the garbage collector of a toolbus service process
// (the router): a higher GOGC than Go's 100 and a soft memory limit.
//
// A router's live heap is small and bounded (the session cache, the
// registry, calls in flight: about 40 MiB with 100,000 sessions listed),
// and it allocates a few KiB per call. At GOGC=100 it collects every time
// it has allocated its live heap again, and the collector's marking, its
// assists and the stacks it shrinks (and the calls then grow again) were a
// third of the router's CPU per call (docs/performance.md). GOGC=400 with
// a soft limit trades that for a bounded amount of memory: the heap may
// grow to five times the live heap, never past the limit, where the
// collector runs as often as it must.
//
// The environment wins: a GOGC or GOMEMLIMIT an operator sets is left as
// it is (docs/operations.md).
package memtune

import (
	"os"
	"runtime/debug"
)

const (
	// DefaultGCPercent is the router's GOGC.
	DefaultGCPercent = 400
	// DefaultMemoryLimit is the router's soft memory limit, in bytes.
	DefaultMemoryLimit = 256 << 20
)

// Settings is what Apply left in effect.
type Settings struct {
	GCPercent   int   // -1: the collector is off
	MemoryLimit int64 // bytes; math.MaxInt64: none
	FromEnv     bool  // GOGC or GOMEMLIMIT came from the environment
}

// Apply sets GOGC to percent and the soft memory limit to limit bytes,
// each unless the environment sets it; limit <= 0 sets no limit. It
// returns what is in effect.
func Apply(percent int, limit int64) Settings {
	var s Settings
	if _, ok := os.LookupEnv("GOGC"); ok {
		s.FromEnv = true
		s.GCPercent = debug.SetGCPercent(-1)
		debug.SetGCPercent(s.GCPercent) // read back, unchanged
	} else {
		debug.SetGCPercent(percent)
		s.GCPercent = percent
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		s.FromEnv = true
	} else if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	s.MemoryLimit = debug.SetMemoryLimit(-1) // a negative limit reads it
	return s
}
