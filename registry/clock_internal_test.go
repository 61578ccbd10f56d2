package registry

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// TestHeldClockLive: liveness by heldClock, at the boundary. A worker beats
// once at t0 (heartbeat 1 s, ticks every 100 ms); the router ticks on time,
// or is held (no tick) and then asked, before or after its first tick
// since. A worker is gone after three heartbeats of the router's own
// time: the time held is left out, the lateness of a tick up to two ticks
// is not.
func TestHeldClockLive(t *testing.T) {
	const tickEvery = 100 * time.Millisecond
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		ticks []time.Duration // after t0, after the beat
		ask   time.Duration   // the wall clock when asked, after t0
		live  bool
	}{
		{"on time, just before three heartbeats", upTo(3 * time.Second), 3*time.Second - time.Nanosecond, true},
		{"on time, three heartbeats: gone", upTo(3 * time.Second), 3 * time.Second, false},
		{"ticks two ticks late: not held", every(200*time.Millisecond, 3*time.Second), 3 * time.Second, false},
		{"held 5 s, asked before its tick", upTo(time.Second), 6 * time.Second, true},
		{"held 5 s, asked after its tick", append(upTo(time.Second), 6*time.Second), 6 * time.Second, true},
		{"held 5 s (1 s to 6.2 s), then three heartbeats of its own less a moment", append(upTo(time.Second), every(tickEvery, 8*time.Second)[61:]...),
			8*time.Second - time.Nanosecond, true},
		{"held 5 s (1 s to 6.2 s), then three heartbeats of its own: gone", append(upTo(time.Second), every(tickEvery, 8*time.Second)[61:]...),
			8 * time.Second, false},
		{"held 5 s, asked later without a tick: held still", upTo(time.Second), time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wall := t0
			c := &heldClock{wall: func() time.Time { return wall }, every: tickEvery}
			l := newLiveness(&wall)
			l.now = c.now
			c.tick()
			l.setBeat("t", "w1", beat{at: l.now(), rev: 1}, false)
			for _, at := range tc.ticks {
				wall = t0.Add(at)
				c.tick()
			}
			wall = t0.Add(tc.ask)
			if got := l.Live(&Tool{Def: bus.ToolDef{Name: "t"}}); got != tc.live {
				t.Fatalf("at %v (clock %v): Live %v, want %v", tc.ask, c.now().Sub(t0), got, tc.live)
			}
			if got := l.MayHold("t", "s.r.c"); got != tc.live {
				t.Fatalf("at %v: MayHold %v, want %v", tc.ask, got, tc.live)
			}
		})
	}
}

// upTo is a tick every 100 ms after 0 up to d.
func upTo(d time.Duration) []time.Duration { return every(100*time.Millisecond, d) }

// every is a tick every e after 0 up to d.
func every(e, d time.Duration) []time.Duration {
	var out []time.Duration
	for at := e; at <= d; at += e {
		out = append(out, at)
	}
	return out
}
