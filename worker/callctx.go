package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callCtx is a call's context: parent's child with the request's expiry
// as deadline (none when it has none), cancelled by stop. The context
// itself (context.WithDeadline's, with its timer and its place among the
// parent's children) is made only when something asks more of it than its
// deadline: Done, Err, Value (context.Cause asks Value) or a child
// context. A handler that never looks at its context, the usual small
// tool, costs neither the allocations nor the timer; one that does sees
// what it would have seen had the context been made at the start: the
// same deadline, ended by a stop, by its parent's end (with its cause) or
// by a deadline that passed, whichever came first. It lives in the call's
// request (worker.go), so it takes no allocation of its own.
type callCtx struct {
	parent   context.Context
	deadline time.Time // zero: none

	once sync.Once
	made atomic.Bool
	ctx  context.Context

	mu      sync.Mutex
	cancel  context.CancelFunc // set once made
	stopped bool
	// stopFirst says the stop came, unmade, before the parent's end and
	// the deadline: the context is then born cancelled by the stop.
	stopFirst bool
}

var _ context.Context = (*callCtx)(nil)

// init makes c parent's child with deadline (zero: none).
func (c *callCtx) init(parent context.Context, deadline time.Time) {
	c.parent, c.deadline = parent, deadline
}

// real is the context itself, made at the first call.
func (c *callCtx) real() context.Context {
	c.once.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		parent := c.parent
		if c.stopFirst {
			// Not its parent's child: its parent may have ended since,
			// and the child of an ended parent is born with the parent's
			// cause. The values are its parent's all the same.
			parent = context.WithoutCancel(parent)
		}
		var ctx context.Context
		var cancel context.CancelFunc
		if c.deadline.IsZero() || c.stopFirst {
			ctx, cancel = context.WithCancel(parent)
		} else {
			ctx, cancel = context.WithDeadline(parent, c.deadline)
		}
		c.ctx, c.cancel = ctx, cancel
		stopped := c.stopped
		if stopped {
			cancel()
		}
		c.made.Store(true)
	})
	return c.ctx
}

// stop ends the context, made or not (a context made later is born ended).
func (c *callCtx) stop() {
	c.mu.Lock()
	if !c.stopped && c.cancel == nil && c.parent != nil {
		c.stopFirst = c.parent.Err() == nil && (c.deadline.IsZero() || time.Now().Before(c.deadline))
	}
	c.stopped = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// cause is context.Cause of the context, without making it. Unmade, it
// is its parent's, or the stop's when that came first; a deadline that
// passed before the parent ended is not told apart (only the drain's
// check asks, after the call returned: such a call is then not answered,
// and its router answered it timeout already).
func (c *callCtx) cause() error {
	if c.made.Load() {
		return context.Cause(c.ctx)
	}
	c.mu.Lock()
	stopFirst := c.stopFirst
	c.mu.Unlock()
	if stopFirst {
		return context.Canceled
	}
	return context.Cause(c.parent)
}

// Deadline is the request's expiry, or the parent's deadline when that
// is earlier, as context.WithDeadline's.
func (c *callCtx) Deadline() (time.Time, bool) {
	pd, ok := c.parent.Deadline()
	if ok && (c.deadline.IsZero() || pd.Before(c.deadline)) {
		return pd, true
	}
	return c.deadline, !c.deadline.IsZero()
}

func (c *callCtx) Done() <-chan struct{} { return c.real().Done() }

func (c *callCtx) Err() error { return c.real().Err() }

func (c *callCtx) Value(key any) any { return c.real().Value(key) }

// String names the context as context's own do.
func (c *callCtx) String() string { return "worker.callCtx" }
