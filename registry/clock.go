package registry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/life"
)

// heldClock is the local clock less the time this router was held (a
// starved process, a GC pause, a suspended VM): the gaps between its ticks
// beyond two ticks. Beats sent meanwhile are read late, so that time is no
// evidence that a worker stopped (docs/registry.md).
type heldClock struct {
	wall  func() time.Time
	every time.Duration        // between ticks
	mark  atomic.Pointer[tick] // the last tick; nil: none yet
}

// tick is when the clock last ticked and how long it was held before.
type tick struct {
	at   time.Time
	held time.Duration
}

// late is the time held since t, at now.
func (t *tick) late(now time.Time, every time.Duration) time.Duration {
	return max(0, now.Sub(t.at)-2*every)
}

// now is the wall clock less the time held so far, the current hold included.
func (c *heldClock) now() time.Time {
	now := c.wall()
	if t := c.mark.Load(); t != nil {
		return now.Add(-t.held - t.late(now, c.every))
	}
	return now
}

// tick records a tick now; only run calls it, but tests.
func (c *heldClock) tick() {
	now, next := c.wall(), &tick{}
	if t := c.mark.Load(); t != nil {
		next.held = t.held + t.late(now, c.every)
	}
	next.at = now
	c.mark.Store(next)
}

// run ticks until ctx ends.
func (c *heldClock) run(ctx context.Context) {
	c.tick()
	life.Every(ctx, c.every, func(time.Time) { c.tick() })
}
