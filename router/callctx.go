package router

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// callCtx is a call's context without the context package's
// allocations and locks: a call's own (job.callContext: the router's base
// context, with the attempt's deadline for a core read-only call of one
// attempt, else with none) and each attempt's of another call (its
// deadline, under the call's: job.attemptContext). It does what
// context.WithDeadline(parent, d) (or WithCancel) does with one
// allocation (its done channel; stop is its cancel, a stopper) where
// WithDeadline takes five, and a pooled timer: it lives in its callState or
// job. How its parent ends it depends on the parent:
//
//   - a callCtx, or a context whose Done is a callCtx's (a value context
//     over one, as a span's): it is among that callCtx's kids, which end
//     with it, under its own lock only. A batch's call is a kid of the root
//     over the router's base (newCallContexts), which ends them all when
//     the base ends (the drain's deadline): no place among the base's
//     children (a map insert and delete under the base's lock, which every
//     call of the router takes);
//   - any other context: through context.AfterFunc on it (the context
//     package's allocations, as any child of a foreign context).
//
// Its Value is its parent's (and itself for callCtxKey): context.Cause of a
// call ended by the base is the base's cause (errDrainDeadline, which
// requestFailed looks for), else its own Err, as for a context of
// WithDeadline's. A context derived from it (WithCancel, AfterFunc) is
// ended by it through AfterFunc below.
type callCtx struct {
	parent   context.Context // its values; and what ends it unless up does
	up       *callCtx        // the callCtx whose kid it is; nil: none
	deadline time.Time
	timed    bool // deadline is set (its own or its parent's, the earlier)
	done     chan struct{}
	state    atomic.Int32 // ctxLive, ctxCanceled, ctxExpired

	// Among up's kids (guarded by up.mu) while linked.
	prev, next *callCtx
	linked     bool

	mu     sync.Mutex
	timer  *callTimer
	afters []*func()   // AfterFunc's, until the context ends
	kids   *callCtx    // the callCtxs under it, linked through prev and next
	unhook func() bool // stops the AfterFunc on a foreign parent
}

const (
	ctxLive int32 = iota
	ctxCanceled
	ctxExpired
)

// callCtxKey is the Value key under which a callCtx is itself: how a
// callCtx started under a context derived from another finds it.
var callCtxKey byte

// start makes c, a zero callCtx, a context of parent ending at d (zero:
// no deadline of its own); stop cancels it.
func (c *callCtx) start(parent context.Context, d time.Time) {
	c.parent = parent
	c.done = make(chan struct{})
	own := !d.IsZero()
	c.deadline, c.timed = d, own
	if pd, ok := parent.Deadline(); ok && (!own || pd.Before(d)) {
		c.deadline, c.timed, own = pd, true, false // the parent ends it first
	}
	if !c.link(parent) {
		return
	}
	if !own {
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

// link makes c end with parent; false when it ended already.
func (c *callCtx) link(parent context.Context) bool {
	if parent.Err() != nil {
		c.end(endedBy(parent))
		return false
	}
	if up := callCtxOf(parent); up != nil {
		c.up = up
		if s := up.adopt(c); s != ctxLive {
			c.end(s)
			return false
		}
		return true
	}
	if parent.Done() == nil {
		return true // never ends (Background, WithoutCancel)
	}
	unhook := context.AfterFunc(parent, func() { c.end(endedBy(parent)) })
	c.mu.Lock()
	live := c.state.Load() == ctxLive
	if live {
		c.unhook = unhook
	}
	c.mu.Unlock()
	if !live {
		unhook()
	}
	return live
}

// callCtxOf is the callCtx that ends ctx: ctx itself, or the one ctx
// carries whose done channel is ctx's (ctx adds values to it, nothing
// that ends it); nil when there is none.
func callCtxOf(ctx context.Context) *callCtx {
	if c, ok := ctx.(*callCtx); ok {
		return c
	}
	c, _ := ctx.Value(&callCtxKey).(*callCtx)
	if c == nil || ctx.Done() != (<-chan struct{})(c.done) {
		return nil
	}
	return c
}

// adopt makes k one of c's kids, ended with it; it returns c's state, and
// a k that is not ctxLive was not adopted (c has ended).
func (c *callCtx) adopt(k *callCtx) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.state.Load(); s != ctxLive {
		return s
	}
	push(&c.kids, k)
	return ctxLive
}

// drop unlinks kid k from c.
func (c *callCtx) drop(k *callCtx) {
	c.mu.Lock()
	defer c.mu.Unlock()
	unlink(&c.kids, k)
}

// push puts c first in the list at head (a callCtx's kids), under the lock
// that guards it.
func push(head **callCtx, c *callCtx) {
	c.prev, c.next, c.linked = nil, *head, true
	if *head != nil {
		(*head).prev = c
	}
	*head = c
}

// unlink takes c out of the list at head, if it is in it, under the lock
// that guards it.
func unlink(head **callCtx, c *callCtx) {
	if !c.linked {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		*head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next, c.linked = nil, nil, false
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

// end ends c in state s, once: its kids ended in the same state, then its
// done channel closed, before it returns (as a cancel of the context
// package ends its children), its timer stopped, its AfterFuncs started, and it
// taken off its parent's kids.
func (c *callCtx) end(s int32) {
	if c.endAs(s) && c.up != nil {
		c.up.drop(c)
	}
}

// endAs ends c in state s unless it ended already (false), without taking
// it off its parent's kids. It holds c.mu while it ends the
// kids (each under its own mu: parent before kid, never the other way).
func (c *callCtx) endAs(s int32) bool {
	c.mu.Lock()
	if !c.state.CompareAndSwap(ctxLive, s) {
		c.mu.Unlock()
		return false
	}
	t, afters, unhook := c.timer, c.afters, c.unhook
	c.timer, c.afters, c.unhook = nil, nil, nil
	for k := c.kids; k != nil; {
		next := k.next
		k.prev, k.next, k.linked = nil, nil, false
		k.endAs(s)
		k = next
	}
	c.kids = nil
	close(c.done) // after the kids': whoever sees c end sees them ended
	c.mu.Unlock()
	if t != nil {
		t.release()
	}
	if unhook != nil {
		unhook()
	}
	for _, f := range afters {
		go (*f)()
	}
	return true
}

// Deadline is c's deadline, or its parent's when that is earlier or c has
// none of its own.
func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, c.timed }
func (c *callCtx) Done() <-chan struct{}       { return c.done }

func (c *callCtx) Value(key any) any {
	if key == &callCtxKey {
		return c
	}
	return c.parent.Value(key)
}

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

// newCallContexts is the root of the call contexts under base: a callCtx
// without a deadline of its own, whose kids a batch's calls are, all ended
// with it when base ends.
func newCallContexts(base context.Context) *callCtx {
	root := new(callCtx)
	root.start(base, time.Time{})
	return root
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
