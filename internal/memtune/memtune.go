// Package memtune sets the garbage collector of toolbus's router and
// worker processes to GOGC=400 with a soft memory limit: at 100 collection
// was a third of the router's CPU per call (docs/performance.md). A GOGC or
// GOMEMLIMIT in the environment wins.
package memtune

import (
	"os"
	"runtime/debug"
)

const (
	// DefaultGCPercent is the router's and toolworker's GOGC.
	DefaultGCPercent = 400
	// DefaultMemoryLimit is their soft memory limit, in bytes.
	DefaultMemoryLimit = 256 << 20
)

// Settings is what Apply left in effect.
type Settings struct {
	GCPercent   int   // -1: the collector is off
	MemoryLimit int64 // bytes; math.MaxInt64: none
	FromEnv     bool  // GOGC or GOMEMLIMIT came from the environment
}

// Apply sets GOGC to percent and the soft memory limit to limit bytes (<= 0:
// none), each unless the environment sets it, and returns what is in effect.
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
