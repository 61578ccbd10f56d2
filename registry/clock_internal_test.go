package registry

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/held"
)

// TestHeldClockLive: liveness by the held clock (internal/held), at the boundary. A worker beats
// once at t0 (heartbeat 1 s, ticks every 100 ms); the router ticks on time,
// late, or not at all for 5 s (held), and is asked at its last tick or
// later. A worker is gone after three heartbeats of the clock: a tick
// moves it on by at most two ticks, so the time held is left out.
func TestHeldClockLive(t *testing.T) {
	const tickEvery = 100 * time.Millisecond
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	hold := append(every(tickEvery, time.Second), 6200*time.Millisecond) // no tick from 1 s to 6.2 s
	for _, tc := range []struct {
		name  string
		ticks []time.Duration // after t0, after the beat
		ask   time.Duration   // the wall clock when asked, after t0
		live  bool
	}{
		{"on time, a tick before three heartbeats", every(tickEvery, 2900*time.Millisecond), 2950 * time.Millisecond, true},
		{"on time, three heartbeats: gone", every(tickEvery, 3*time.Second), 3 * time.Second, false},
		{"two ticks apart: on time", every(2*tickEvery, 3*time.Second), 3 * time.Second, false},
		{"three ticks apart: two of each three count", every(3*tickEvery, 3*time.Second), 3 * time.Second, true},
		{"held, asked before its tick", every(tickEvery, time.Second), 6 * time.Second, true},
		{"held, asked at its tick", hold, 6200 * time.Millisecond, true},
		{"held, then three heartbeats of the clock less a tick", append(hold, every(tickEvery, 7900*time.Millisecond)[62:]...), 7900 * time.Millisecond, true},
		{"held, then three heartbeats of the clock: gone", append(hold, every(tickEvery, 8*time.Second)[62:]...), 8 * time.Second, false},
		{"held, asked an hour later without a tick", every(tickEvery, time.Second), time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wall := t0
			c := held.New(func() time.Time { return wall }, tickEvery)
			l := newLiveness(&wall)
			l.now = c.Now
			c.Tick()
			l.setBeat("t", "w1", beat{at: l.now(), rev: 1}, false)
			for _, at := range tc.ticks {
				wall = t0.Add(at)
				c.Tick()
			}
			wall = t0.Add(tc.ask)
			if got := l.Live(&Tool{Def: bus.ToolDef{Name: "t"}}); got != tc.live {
				t.Fatalf("at %v (clock %v): Live %v, want %v", tc.ask, c.Now().Sub(t0), got, tc.live)
			}
			if got := l.MayHold("t", "s.r.c"); got != tc.live {
				t.Fatalf("at %v: MayHold %v, want %v", tc.ask, got, tc.live)
			}
		})
	}
}

// every is a tick every e after 0 up to d.
func every(e, d time.Duration) []time.Duration {
	var out []time.Duration
	for at := e; at <= d; at += e {
		out = append(out, at)
	}
	return out
}
