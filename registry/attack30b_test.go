package registry

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/held"
)

// TestAttackHeldClockStarved (session 30, second red team): whoever loads
// the router's host so that every tick of its liveness clock comes late,
// not only once (a hold), slows the clock, and so keeps a stopped worker
// live longer; it cannot stop it: each tick moves it by at most two ticks
// and at least by the time since the last (a tick as late as L ticks moves
// it 2 of L). With ticks 10 times late (a tick each heartbeat), a worker
// that stopped is gone after 15 heartbeats of wall time, not 3, and never
// later. Nothing from the bus moves the clock: the router stamps a beat
// with it as it reads the beat.
func TestAttackHeldClockStarved(t *testing.T) {
	const hb, tickEvery = time.Second, 100 * time.Millisecond
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	wall := t0
	c := held.New(func() time.Time { return wall }, tickEvery)
	l := newLiveness(&wall)
	l.now = c.Now
	c.Tick()
	l.setBeat("t", "w1", beat{at: l.now(), rev: 1}, false)
	tool := &Tool{Def: bus.ToolDef{Name: "t"}}
	var gone time.Duration
	for at := hb; at <= 20*hb && gone == 0; at += hb { // 10 ticks late each
		wall = t0.Add(at)
		c.Tick()
		if !l.Live(tool) {
			gone = at
		}
	}
	if gone != 15*hb {
		t.Fatalf("the stopped worker gone at %v of wall time (clock %v), want 15 s", gone, c.Now().Sub(t0))
	}
}
