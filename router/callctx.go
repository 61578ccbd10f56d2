package router

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// callCtx is the one context of a core read-only call of one attempt
// (job.callContext): the router's base context with the attempt's
// deadline. It does what context.WithDeadline(base, d) does with one
// allocation (its done channel; stop is its cancel, a stopper) where
// WithDeadline takes five, and a pooled timer: it lives in its callState, and instead
// of a place among the base's children (a map insert and delete under the
// base's lock, which every call of the router takes) it is listed in the
// pipeline's callContexts, which end every listed context when the base
// ends (the drain's deadline).
//
// Its Value is the base's: context.Cause of a call ended by the base is
// the base's cause (errDrainDeadline, which requestFailed looks for), else
// its own Err, as for a context of WithDeadline's. A context derived from
// it (WithCancel, AfterFunc) is ended by it through AfterFunc below.
type callCtx struct {
	parent   context.Context
	deadline time.Time
	done     chan struct{}
	state    atomic.Int32 // ctxLive, ctxCanceled, ctxExpired

	list       *callContexts
	prev, next *callCtx // in list while listed; guarded by list.mu
	listed     bool

	mu     sync.Mutex
	timer  *callTimer
	afters []*func() // AfterFunc's, until the context ends
}

const (
	ctxLive int32 = iota
	ctxCanceled
	ctxExpired
)

// start makes c a context of parent (list's base) ending at d; stop
// cancels it.
func (c *callCtx) start(list *callContexts, parent context.Context, d time.Time) {
	c.parent, c.deadline, c.list = parent, d, list
	c.done = make(chan struct{})
	if parent.Err() != nil || !list.add(c) {
		c.end(endedBy(parent))
		return
	}
	dur := time.Until(d)
	if dur <= 0 {
		c.end(ctxExpired)
		return
	}
	c.mu.Lock()
	if c.state.Load() == ctxLive {
		c.timer = startCallTimer(c, dur)
	}
	c.mu.Unlock()
}

// stop cancels c (stopper).
func (c *callCtx) stop() { c.end(ctxCanceled) }

// endedBy is the state of a call context whose parent ended.
func endedBy(parent context.Context) int32 {
	if errors.Is(parent.Err(), context.DeadlineExceeded) {
		return ctxExpired
	}
	return ctxCanceled
}

// end ends c in state s, once: its done channel closed, its timer stopped,
// its AfterFuncs started.
func (c *callCtx) end(s int32) {
	if !c.state.CompareAndSwap(ctxLive, s) {
		return
	}
	close(c.done)
	c.list.remove(c)
	c.mu.Lock()
	t, afters := c.timer, c.afters
	c.timer, c.afters = nil, nil
	c.mu.Unlock()
	if t != nil {
		t.release()
	}
	for _, f := range afters {
		go (*f)()
	}
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }
func (c *callCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *callCtx) Err() error {
	switch c.state.Load() {
	case ctxCanceled:
		return context.Canceled
	case ctxExpired:
		return context.DeadlineExceeded
	}
	return nil
}

// AfterFunc is what context.AfterFunc and a context derived from c use
// (the context package's afterFuncer): f runs in its own goroutine once c
// ends; stop unschedules it.
func (c *callCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.state.Load() != ctxLive {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	p := &f
	c.afters = append(c.afters, p)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.afters, p)
		if i < 0 {
			return false
		}
		c.afters = slices.Delete(c.afters, i, i+1)
		return true
	}
}

// callContexts are the live call contexts of one base context: ended
// with it.
type callContexts struct {
	base  context.Context
	mu    sync.Mutex
	head  *callCtx
	ended bool
}

// newCallContexts lists the call contexts of base, which it ends when
// base ends.
func newCallContexts(base context.Context) *callContexts {
	x := &callContexts{base: base}
	context.AfterFunc(base, x.endAll)
	return x
}

// add lists c; false once the base has ended.
func (x *callContexts) add(c *callCtx) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended {
		return false
	}
	c.next = x.head
	if x.head != nil {
		x.head.prev = c
	}
	x.head, c.listed = c, true
	return true
}

func (x *callContexts) remove(c *callCtx) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !c.listed {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		x.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next, c.listed = nil, nil, false
}

// endAll ends every listed context, and any added later at once.
func (x *callContexts) endAll() {
	x.mu.Lock()
	x.ended = true
	var all []*callCtx
	for c := x.head; c != nil; {
		next := c.next
		c.prev, c.next, c.listed = nil, nil, false
		all = append(all, c)
		c = next
	}
	x.head = nil
	x.mu.Unlock()
	s := endedBy(x.base)
	for _, c := range all {
		c.end(s)
	}
}

// callTimer is a call context's deadline timer, pooled: a timer whose
// Stop reports it never fired is started again for the next call; one
// that fired (or is firing) is let go.
type callTimer struct {
	t *time.Timer
	c atomic.Pointer[callCtx]
}

var callTimers sync.Pool

func startCallTimer(c *callCtx, d time.Duration) *callTimer {
	ct, _ := callTimers.Get().(*callTimer)
	if ct == nil {
		ct = new(callTimer)
		ct.c.Store(c)
		ct.t = time.AfterFunc(d, ct.fire)
		return ct
	}
	ct.c.Store(c)
	ct.t.Reset(d)
	return ct
}

func (ct *callTimer) fire() {
	if c := ct.c.Load(); c != nil {
		c.end(ctxExpired)
	}
}

func (ct *callTimer) release() {
	if ct.t.Stop() {
		ct.c.Store(nil)
		callTimers.Put(ct)
	}
}
