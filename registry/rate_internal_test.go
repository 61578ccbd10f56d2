package registry

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestRate holds the registration rate (docs/registry.md) to what users do,
// a fleet starting, beating, reconnecting and restarting, all taken at the
// default rate, and to what one login flooding with max-payload messages
// gets: the burst, then the rate, each refusal charging nothing, no other
// account touched. Time is synctest's.
func TestRate(t *testing.T) {
	const (
		kib  = 1 << 10
		mib  = 1 << 20
		beat = 5 * time.Second
	)
	type send struct {
		after time.Duration // since the step before
		key   string
		n     int // messages
		size  int // bytes each
		taken int // of them taken
	}
	beats := func(key string, n, size, times int) []send { // a fleet's beats, one a heartbeat
		var s []send
		for range times {
			s = append(s, send{beat, key, n, size, n})
		}
		return s
	}
	cat := func(parts ...[]send) (all []send) {
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	for _, tc := range []struct {
		name  string
		rate  int64
		sends []send
	}{
		{"a fleet of 1,000 workers of one tool starts, beats for 10 minutes", 0, cat(
			[]send{{0, "fleet", 1000, 4 * kib, 1000}},
			beats("fleet", 1000, 4*kib, 120))},
		{"200 workers of 20 tools each (4,000 registrations) start, beat, reconnect a second after a beat, beat on", 0, cat(
			[]send{{0, "fleet", 4000, 4 * kib, 4000}},
			beats("fleet", 4000, 4*kib, 12),
			[]send{{time.Second, "fleet", 4000, 4 * kib, 4000}, {beat - time.Second, "fleet", 4000, 4 * kib, 4000}},
			beats("fleet", 4000, 4*kib, 12))},
		{"a rolling restart: each of 100 workers of 20 tools re-registers within the beat, beside the beats", 0, cat(
			[]send{{0, "fleet", 2000, 4 * kib, 2000}},
			func() (s []send) {
				for i := range 100 {
					s = append(s, send{beat / 100, "fleet", 20, 4 * kib, 20})
					if i%100 == 99 {
						s = append(s, send{0, "fleet", 2000, 4 * kib, 2000})
					}
				}
				return s
			}(),
			beats("fleet", 2000, 4*kib, 12))},
		{"workers of the largest definitions (128 KiB): 100 start at once and beat", 0, cat(
			[]send{{0, "fleet", 100, 128 * kib, 100}},
			beats("fleet", 100, 128*kib, 60))},
		{"one login sends max-payload registrations in a loop: the burst, then one each 2 s", 0, []send{
			{0, "attacker", 10, 8 * mib, 4},
			{time.Second, "attacker", 1, 8 * mib, 0},
			{time.Second, "attacker", 10, 8 * mib, 1},
			{10 * time.Second, "attacker", 10, 8 * mib, 4}, // the burst again, no more
			{0, "fleet", 1000, 4 * kib, 1000},              // another account is untouched
			{time.Minute, "attacker", 10, 8 * mib, 4},
		}},
		{"a refusal charges nothing", 0, []send{
			{0, "a", 4, 8 * mib, 4},
			{time.Second, "a", 1, 8 * mib, 0},
			{0, "a", 1, 4 * mib, 1},
			{0, "a", 1, 1, 0},
		}},
		{"a registration larger than the burst is never taken", 1 * mib, []send{
			{0, "a", 1, 8*mib + 1, 0},
			{time.Hour, "a", 1, 8*mib + 1, 0},
			{0, "a", 1, 8 * mib, 1},
		}},
		{"no bound", -1, []send{{0, "a", 100, 64 * mib, 100}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := NewRate(tc.rate)
				for i, s := range tc.sends {
					time.Sleep(s.after)
					taken := 0
					for range s.n {
						if r.Take(s.key, s.size) {
							taken++
						}
					}
					if taken != s.taken {
						t.Fatalf("send %d (%s, %d of %d bytes): %d taken, want %d", i, s.key, s.n, s.size, taken, s.taken)
					}
				}
			})
		})
	}
}

// TestRateKeysBound: the accounts remembered stay bounded, those with the
// most left forgotten first, and one forgotten starts again full.
func TestRateKeysBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(1 << 20)
		if !r.Take("flood", 8<<20) || r.Take("flood", 1) {
			t.Fatal("flood: want its burst taken, then nothing")
		}
		for i := 0; len(r.keys) < maxRateKeys; i++ {
			r.Take(fmt.Sprint(i), 1)
		}
		// None is full: those with half their burst or more are forgotten,
		// flood's empty allowance kept.
		r.Take("more", 1)
		if len(r.keys) != 2 || r.Take("flood", 1) {
			t.Fatalf("%d keys after the sweep, want flood's (still empty) and the new one", len(r.keys))
		}
		for i := range 3 * maxRateKeys {
			r.Take(fmt.Sprint(i), 1)
			if len(r.keys) > maxRateKeys {
				t.Fatalf("%d keys remembered, bound %d", len(r.keys), maxRateKeys)
			}
		}
		time.Sleep(time.Second)
		if r.Take("flood", 2<<20) || !r.Take("flood", 1<<20) {
			t.Fatal("flood's allowance after a second: want 1 MiB, kept through the sweeps")
		}
	})
}
