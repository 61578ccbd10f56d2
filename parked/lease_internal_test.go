package parked

import (
	"slices"
	"testing"
)

// The two kinds of key keep their own lease sets: holding a call key never
// makes a continuation's lease held, nor the other way round.
func TestLeaseSetsByKind(t *testing.T) {
	var (
		calls leaseSet[callKey]
		conts leaseSet[batchKey]
	)
	calls.hold("s.r.c1")
	conts.hold("s.r")
	conts.hold("s.r2")
	conts.release("s.r2")
	if !calls.holds("s.r.c1") || calls.holds("s.r") {
		t.Errorf("call leases %v", calls.held())
	}
	if got := conts.held(); !slices.Equal(got, []batchKey{"s.r"}) {
		t.Errorf("continuation leases %v, want [s.r]", got)
	}
	calls.release("s.r.c1")
	if len(calls.held()) != 0 {
		t.Errorf("released call lease still held: %v", calls.held())
	}
}
