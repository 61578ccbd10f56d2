// Package held is a clock that leaves out the time its process was held (a
// starved process, a GC pause, a suspended VM): what it could not read then
// is no evidence that others stopped (docs/registry.md, docs/parked.md).
package held

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/life"
)

// Clock moves on only as it ticks, every tick, and each tick by the time
// since the one before but at most two ticks; concurrency-safe.
type Clock struct {
	wall  func() time.Time
	every time.Duration
	last  atomic.Pointer[tick] // nil: no tick yet, the wall clock
	// Start's: ends the ticks (nil before), which ticks waits for.
	cancel context.CancelFunc
	ticks  sync.WaitGroup
}

// tick is a tick's wall time and the clock's time then.
type tick struct{ at, now time.Time }

// New returns a Clock over wall that ticks every tick once started.
func New(wall func() time.Time, every time.Duration) *Clock {
	return &Clock{wall: wall, every: max(every, time.Millisecond)}
}

// Now is the clock's time: one atomic load, no clock read.
func (c *Clock) Now() time.Time {
	if t := c.last.Load(); t != nil {
		return t.now
	}
	return c.wall()
}

// Tick moves the clock on; only Start's ticks call it, but tests.
func (c *Clock) Tick() {
	at := c.wall()
	next := &tick{at: at, now: at}
	if t := c.last.Load(); t != nil {
		next.now = t.now.Add(min(at.Sub(t.at), 2*c.every))
	}
	c.last.Store(next)
}

// Start ticks until Stop; the ticks outlive ctx, as the component that
// starts them does. Start once.
func (c *Clock) Start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c.ticks.Go(func() {
		c.Tick()
		life.Every(ctx, c.every, func(time.Time) { c.Tick() })
	})
}

// Stop ends the ticks, waiting for them until ctx ends (then its error);
// safe twice, before Start and on a nil Clock.
func (c *Clock) Stop(ctx context.Context) error {
	if c != nil && c.cancel != nil {
		c.cancel()
		if !life.WaitFor(ctx, &c.ticks) {
			return ctx.Err()
		}
	}
	return nil
}
