package registry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/life"
)

// heldClock is liveness's clock: it moves on only as it ticks, every tenth
// of a heartbeat, and each tick by the time since the one before but at
// most two ticks. The time the router was held (a starved process, a GC
// pause, a suspended VM) is left out: the beats sent meanwhile are read
// late, so that time is no evidence that a worker stopped (docs/registry.md).
type heldClock struct {
	wall  func() time.Time
	every time.Duration
	last  atomic.Pointer[tick] // nil: no tick yet, the wall clock
}

// tick is a tick's wall time and the clock's time then.
type tick struct{ at, now time.Time }

// now is the clock's time: one atomic load, no clock read.
func (c *heldClock) now() time.Time {
	if t := c.last.Load(); t != nil {
		return t.now
	}
	return c.wall()
}

// tick moves the clock on; only run calls it, but tests.
func (c *heldClock) tick() {
	at := c.wall()
	next := &tick{at: at, now: at}
	if t := c.last.Load(); t != nil {
		next.now = t.now.Add(min(at.Sub(t.at), 2*c.every))
	}
	c.last.Store(next)
}

// run ticks until ctx ends.
func (c *heldClock) run(ctx context.Context) {
	c.tick()
	life.Every(ctx, c.every, func(time.Time) { c.tick() })
}
