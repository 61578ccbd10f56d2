package registry

import (
	"sync"
	"time"
)

// DefaultRegisterRate is the bytes of registrations a router reads a second
// from one NATS account, after a burst of RegisterBurst seconds of them
// (docs/registry.md: what a decode costs, and what a fleet sends);
// maxRateKeys bounds the accounts remembered (the server names them).
const (
	DefaultRegisterRate = 4 << 20
	RegisterBurst       = 8
	maxRateKeys         = 4096
)

// Rate bounds, per key (the NATS account the server names on a
// registration), the bytes of registrations a router reads: a token bucket
// of bytes, charged before the decode. A nil *Rate takes everything.
type Rate struct {
	mu            sync.Mutex
	perSec, burst float64
	keys          map[string]*allowance
}

// allowance is one key's bytes left at a time.
type allowance struct {
	left float64
	at   time.Time
}

// NewRate bounds each key to perSec bytes a second after a burst of
// RegisterBurst seconds of them; 0 takes DefaultRegisterRate, a negative
// perSec no bound (nil).
func NewRate(perSec int64) *Rate {
	if perSec < 0 {
		return nil
	}
	if perSec == 0 {
		perSec = DefaultRegisterRate
	}
	return &Rate{perSec: float64(perSec), burst: float64(perSec) * RegisterBurst, keys: map[string]*allowance{}}
}

// Take charges n bytes to key and reports whether its allowance held them;
// when it did not, nothing is charged (the refused message does not count
// against the next).
func (r *Rate) Take(key string, n int) bool {
	if r == nil {
		return true
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.keys[key]
	if a == nil {
		if len(r.keys) >= maxRateKeys {
			r.sweep(now)
		}
		a = &allowance{left: r.burst, at: now}
		r.keys[key] = a
	}
	a.left, a.at = r.at(a, now), now
	if float64(n) > a.left {
		return false
	}
	a.left -= float64(n)
	return true
}

// Limits returns the bytes a second and the burst, for a refusal's text.
func (r *Rate) Limits() (perSec, burst int64) { return int64(r.perSec), int64(r.burst) }

// at is a's allowance at now.
func (r *Rate) at(a *allowance, now time.Time) float64 {
	return min(r.burst, a.left+max(0, now.Sub(a.at).Seconds())*r.perSec)
}

// sweep makes room: it forgets the keys whose allowance is full again (a
// new one starts full), else those with half of it or more, else all (past
// maxRateKeys accounts, each spending more than half its burst).
func (r *Rate) sweep(now time.Time) {
	for _, floor := range []float64{r.burst, r.burst / 2, 0} {
		for k, a := range r.keys {
			if r.at(a, now) >= floor {
				delete(r.keys, k)
			}
		}
		if len(r.keys) < maxRateKeys {
			return
		}
	}
}
