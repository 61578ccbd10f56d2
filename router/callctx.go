package router

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// callCtx is a call's or an attempt's context (job.callContext,
// job.attemptContext) without the context package's allocations and locks:
// what context.WithDeadline does with one allocation (its done channel)
// where WithDeadline takes five, and a pooled timer; it lives in its
// callState or job. A parent that is a callCtx, or whose Done is one's (a
// span's value context), ends it as one of its kids, under that one's lock
// only; a batch's calls are kids of the root over the router's base
// (newCallContexts), so no call takes the base's lock. Any other parent
// ends it through context.AfterFunc. Its Value is its parent's, so
// context.Cause of a call the base ended is the base's (errDrainDeadline);
// a context derived from it is ended through its AfterFunc. The root ends
// its kids at their own deadlines on one timer of its own (sweeper), not a
// timer per call.
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
	timer  *time.Timer // its deadline's, under no root
	afters []*func()   // AfterFunc's, until the context ends
	kids   *callCtx    // the callCtxs under it, linked through prev and next
	unhook func() bool // stops the AfterFunc on a foreign parent
	sw     *sweeper    // a root's (newCallContexts): its kids' own deadlines
}

const (
	ctxLive int32 = iota
	ctxCanceled
	ctxExpired
)

// callCtxKey is the Value key under which a callCtx is itself.
var callCtxKey byte

// start makes zero c a context of parent ending at d (zero: none); stop cancels it.
func (c *callCtx) start(parent context.Context, d time.Time) {
	c.parent = parent
	c.done = make(chan struct{})
	own := !d.IsZero()
	c.deadline, c.timed = d, own
	if pd, ok := parent.Deadline(); ok && (!own || pd.Before(d)) {
		c.deadline, c.timed, own = pd, true, false // the parent ends it first
	}
	var dur time.Duration
	if own {
		dur = time.Until(d)
	}
	if !c.link(parent, dur > 0) || !own {
		return
	}
	if dur <= 0 {
		c.end(ctxExpired)
		return
	}
	if c.up != nil && c.up.sw != nil {
		return // its root's sweeper ends it (adopt)
	}
	if r := c.up.root(); r != nil { // a kid's kid: in the root's tree
		r.mu.Lock()
		if r.state.Load() == ctxLive {
			r.sw.arm(d, r)
		}
		r.mu.Unlock()
		return
	}
	c.mu.Lock()
	if c.state.Load() == ctxLive {
		c.timer = time.AfterFunc(dur, func() { c.end(ctxExpired) })
	}
	c.mu.Unlock()
}

// root is the root (newCallContexts) c is under, or c; nil: none.
func (c *callCtx) root() *callCtx {
	for ; c != nil && c.sw == nil; c = c.up {
	}
	return c
}

// link makes c end with parent, and at its own deadline to come (due)
// under a root; false when it ended already.
func (c *callCtx) link(parent context.Context, due bool) bool {
	if parent.Err() != nil {
		c.end(endedBy(parent))
		return false
	}
	if up := callCtxOf(parent); up != nil {
		c.up = up
		if s := up.adopt(c, due); s != ctxLive {
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

// callCtxOf is the callCtx that ends ctx: ctx, or the one it carries with
// the same done channel (ctx adds only values); nil when none.
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

// adopt makes k one of c's kids, swept at its deadline when due and c is
// a root, and returns c's state (not ctxLive: not adopted).
func (c *callCtx) adopt(k *callCtx, due bool) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.state.Load(); s != ctxLive {
		return s
	}
	k.prev, k.next, k.linked = nil, c.kids, true
	if c.kids != nil {
		c.kids.prev = k
	}
	c.kids = k
	if due && c.sw != nil {
		c.sw.arm(k.deadline, c)
	}
	return ctxLive
}

// drop takes kid k, if linked, out of c's kids.
func (c *callCtx) drop(k *callCtx) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !k.linked {
		return
	}
	if k.prev != nil {
		k.prev.next = k.next
	} else {
		c.kids = k.next
	}
	if k.next != nil {
		k.next.prev = k.prev
	}
	k.prev, k.next, k.linked = nil, nil, false
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

// end ends c in state s, once: its kids, then its done channel, before it
// returns (as the context package does); then its timer, AfterFuncs and
// place among its parent's kids.
func (c *callCtx) end(s int32) {
	if c.endAs(s) && c.up != nil {
		c.up.drop(c)
	}
}

// endAs is end but for the parent's kids (false: ended already). It holds
// c.mu while it ends the kids: parent's lock before kid's, never the other way.
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
	if w := c.sw; w != nil && w.t != nil {
		w.t.Stop()
	}
	close(c.done) // after the kids': whoever sees c end sees them ended
	c.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	if unhook != nil {
		unhook()
	}
	for _, f := range afters {
		go (*f)()
	}
	return true
}

// Deadline is c's own deadline or its parent's, the earlier.
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

// AfterFunc is the context package's afterFuncer: f runs in its own
// goroutine once c ends; stop unschedules it.
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

// newCallContexts is the root of the batch calls' contexts under base.
func newCallContexts(base context.Context) *callCtx {
	root := &callCtx{sw: new(sweeper)}
	root.start(base, time.Time{})
	return root
}

// sweeper ends a root's kids at their own deadlines on one timer, armed
// for the earliest kid when it came; a kid that ends first leaves it as it
// is, and its fire arms it for the earliest kid then. A timer per call put
// one into a P's timer heap and took it out again per call
// (docs/performance.md, session 31). Guarded by the root's mu.
type sweeper struct {
	t  *time.Timer
	at time.Time // when t fires; zero: not armed
}

// arm arms the timer for d unless it is armed for d or sooner.
func (w *sweeper) arm(d time.Time, root *callCtx) {
	if !w.at.IsZero() && !d.Before(w.at) {
		return
	}
	w.at = d
	if w.t == nil {
		w.t = time.AfterFunc(time.Until(d), func() { w.sweep(root, time.Now()) })
	} else {
		w.t.Reset(time.Until(d))
	}
}

// sweep ends the callCtxs under root whose deadlines passed by now and
// arms the timer for the earliest of the others.
func (w *sweeper) sweep(root *callCtx, now time.Time) {
	root.mu.Lock()
	w.at = time.Time{}
	due, next := dueIn(root.kids, now, nil, time.Time{})
	if !next.IsZero() && root.state.Load() == ctxLive {
		w.arm(next, root)
	}
	root.mu.Unlock()
	for _, k := range due {
		k.end(ctxExpired) // unless it ended meanwhile
	}
}

// dueIn adds to due the kids from k on, and their kids, whose deadlines
// passed by now, and returns with next the earliest deadline of the others.
// The kids' parent's lock is held; it takes each kid's (parent before kid).
func dueIn(k *callCtx, now time.Time, due []*callCtx, next time.Time) ([]*callCtx, time.Time) {
	for ; k != nil; k = k.next {
		switch {
		case !k.timed:
		case !now.Before(k.deadline):
			due = append(due, k) // its kids end with it
			continue
		case next.IsZero() || k.deadline.Before(next):
			next = k.deadline
		}
		k.mu.Lock()
		due, next = dueIn(k.kids, now, due, next)
		k.mu.Unlock()
	}
	return due, next
}
