// Package replies waits for replies on one wildcard subscription of its own,
// handing each reply inline to the wait that registered its inbox; unlike
// nats.go's request it pools channels and timers and can reuse inboxes. A
// late reply is never taken for another request's.
package replies

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/slab"
)

// Mux is one reply subscription and the waits registered on it. Its zero
// value is not usable: make one with New.
type Mux struct {
	nc      *nats.Conn
	opts    Options
	once    sync.Once
	prefix  string // the subscription's inbox, with a trailing dot
	err     error
	mu      sync.Mutex
	seq     uint64
	waiting map[string]*Wait
	idle    chan struct{} // closed once nothing is awaited (Flush)
	closed  bool          // EndOnClose: the connection closed, or Close; no wait registers
	free    sync.Pool
	sub     *nats.Subscription
	status  chan nats.Status // what endOn reads (Reset, EndOnClose)
	n       notices          // Options.Notices's side

	p relays // Options.Progress's side
}

// relays is a Mux's progress side: its subscription, and how far the
// subscription's goroutine got, under the Mux's lock. started counts the
// messages begun, handled those handed on or dropped, drains the times the
// subscription was left empty, dropped the NATS client's drops reported;
// relaying is the wait whose progress is in hand. caught (on the Mux's
// lock) is signalled after each message, and on close.
type relays struct {
	sub                      *nats.Subscription
	started, handled, drains uint64
	dropped                  int
	relaying                 *Wait
	caught                   sync.Cond
}

// counted counts a message handled, taking the lock, and returns how many
// more the NATS client dropped.
func (r *relays) counted() (dropped int) {
	r.caught.L.Lock()
	r.relaying = nil
	r.handled++
	if r.sub != nil {
		if n, _, _ := r.sub.Pending(); n <= 1 { // the message handled only: the NATS client counts it until its handler returns
			r.drains++
		}
		if d, err := r.sub.Dropped(); err == nil && d > r.dropped {
			dropped, r.dropped = d-r.dropped, d
		}
	}
	r.caught.L.Unlock()
	r.caught.Broadcast()
	return dropped
}

// mark notes in w, a tagged wait, the progress read so far: handled, in
// hand or pending. The lock is held.
func (r *relays) mark(w *Wait) {
	n, _, _ := r.sub.Pending()
	w.mark, w.epoch = r.handled+uint64(max(n, 0)), r.drains
}

// behind reports whether progress read before w's mark may not have been
// handled yet: not when nothing is queued or in hand (a mark taken after a
// message was counted but before the NATS client uncounted it, as its
// handler returned, is one too high, and no message may come to reach it).
// With none in hand and one pending, which may be that uncounted one, it
// looks again in a millisecond. The lock is held.
func (r *relays) behind(w *Wait) bool {
	if r.handled >= w.mark || r.drains != w.epoch {
		return false
	}
	if r.started > r.handled {
		return true // its counted wakes the waiters
	}
	switch n, _, _ := r.sub.Pending(); {
	case n <= 0:
		return false
	case n == 1:
		time.AfterFunc(time.Millisecond, r.caught.Broadcast)
	}
	return true
}

// Options say how a Mux's waits end besides their reply.
type Options struct {
	// Reset: a reconnect ends every wait with a nil reply.
	Reset bool
	// EndOnClose: the connection's close ends every wait with a nil reply,
	// and Await fails with nats.ErrConnectionClosed from then on.
	EndOnClose bool
	// KeepInbox: a replied wait keeps its inbox; only for trusted repliers
	// that answer once (JetStream acknowledgements).
	KeepInbox bool
	// Unguessable: inboxes end in 64 random bits, for untrusted repliers
	// (workers, docs/security.md) who could otherwise answer the next one.
	Unguessable bool
	// Progress, when set, is handed each message to a tagged wait's inbox
	// + bus.ProgressSuffix (an exec's progress, docs/protocol.md 5.3) with
	// the tag its request gave; the wait goes on. Progress comes on a
	// subscription of its own, with small pending limits (past them the
	// NATS client drops it, never a reply), and runs on its goroutine, in
	// order, outside the lock, so no reply waits behind it. Never for a
	// wait once its Done returned: Done waits for the message in hand, and
	// a replied wait's Done for the progress read before its reply (at
	// most the pending limits' worth), so a call's progress precedes its
	// result. Progress implies EndOnClose.
	Progress func(tag any, m *nats.Msg)
	// Notices: running notices (docs/protocol.md 3.2.1) on a wait's inbox
	// + bus.RunningSuffix hold back RequestUntil's re-sends; they come on a
	// subscription of their own with Progress's pending limits.
	Notices bool
	// ProgressDropped, with Progress, is told on Progress's goroutine how
	// many more progress messages were dropped: by the NATS client past the
	// limits, or here for want of a tagged wait (stray, or late).
	ProgressDropped func(n int)
}

// The progress subscription's pending limits: what a flood may queue.
const (
	progressPendingMsgs  = 1024
	progressPendingBytes = 1 << 20
)

// New returns a Mux on nc; it subscribes on the first Await.
func New(nc *nats.Conn, opts Options) *Mux {
	opts.EndOnClose = opts.EndOnClose || opts.Progress != nil
	a := &Mux{nc: nc, opts: opts, waiting: map[string]*Wait{}}
	a.p.caught.L = &a.mu
	return a
}

// Conn is the connection the Mux subscribes on.
func (a *Mux) Conn() *nats.Conn { return a.nc }

// Wait is one request's wait for its reply.
type Wait struct {
	inbox string
	ch    chan *nats.Msg
	tag   any // the request's, for Options.Progress
	// replied: a tagged wait's reply came (it stays in waiting until Done
	// for its progress), when the progress read before it was handled by
	// the mark'th message handled, or by the next drain.
	replied     bool
	mark, epoch uint64
	// RequestUntil's re-sends (Options.Notices), on the Mux's lock: due
	// ends the window of silence, told by late at the latest (zero: no
	// more re-sends; else w is in the notices' heap, at i); sent counts
	// the re-sends poke told of.
	rs        Resend
	due, late time.Time
	i, sent   int
	poke      chan struct{}
}

// Inbox is the reply subject of the wait's request.
func (w *Wait) Inbox() string { return w.inbox }

// C delivers the reply, once; nil when the connection reconnected (Reset)
// or closed (EndOnClose).
func (w *Wait) C() <-chan *nats.Msg { return w.ch }

// Forget says the wait's reply may still come to its inbox (it ended
// without one, by a reset): when it is reused it takes a new inbox.
func (w *Wait) Forget() { w.inbox = "" }

// Await registers a wait, subscribing on first use. With max set, it
// returns nil, and no error, while max waits are registered.
func (a *Mux) Await(max int) (*Wait, error) { return a.await(max, nil, Resend{}) }

// AwaitTagged registers a wait whose progress Options.Progress gets with
// tag; its reply may never come (Done(w, false) ends it).
func (a *Mux) AwaitTagged(tag any) (*Wait, error) { return a.await(0, tag, Resend{}) }

// await is Await with the tag Options.Progress is given for the wait, and
// its re-sends.
func (a *Mux) await(max int, tag any, rs Resend) (*Wait, error) {
	a.once.Do(a.subscribe)
	if a.err != nil {
		return nil, a.err
	}
	w, _ := a.free.Get().(*Wait)
	if w == nil {
		w = &Wait{ch: make(chan *nats.Msg, 1)}
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.free.Put(w)
		return nil, nats.ErrConnectionClosed
	}
	if max > 0 && len(a.waiting) >= max {
		a.mu.Unlock()
		a.free.Put(w)
		return nil, nil
	}
	if w.inbox == "" || !a.opts.KeepInbox {
		w.inbox = a.newInbox()
	}
	w.tag = tag
	a.waiting[w.inbox] = w
	a.n.watch(w, rs)
	a.mu.Unlock()
	return w, nil
}

// Request publishes with send(inbox) and waits for the reply until ctx ends,
// with nats.Conn.RequestMsgWithContext's errors; Options.Progress gets tag.
func (a *Mux) Request(ctx context.Context, tag any, send func(inbox string) error) (*nats.Msg, error) {
	return a.RequestUntil(ctx, time.Time{}, tag, Resend{}, send)
}

// Resend says when RequestUntil sends its request again: after First
// without the reply or a notice naming ReplyID (of type
// io.toolbus.call.running), after AfterNotice past such a notice, each with
// up to 20 % jitter, at most Max times (docs/protocol.md 3.2.1).
type Resend struct {
	First, AfterNotice time.Duration
	Max                int
	ReplyID            string
}

// RequestUntil is Request also ending at deadline (zero: none) with
// context.DeadlineExceeded, on a pooled timer instead of a new context,
// and calling send again, with the same inbox, as rs says (Max below one: never);
// send must publish the same message each time.
func (a *Mux) RequestUntil(ctx context.Context, deadline time.Time, tag any, rs Resend, send func(inbox string) error) (*nats.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var within time.Duration
	if !deadline.IsZero() {
		if within = time.Until(deadline); within <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	w, err := a.await(0, tag, rs)
	if err != nil {
		return nil, err
	}
	if err := send(w.inbox); err != nil {
		a.Done(w, false)
		return nil, err
	}
	resend := func() {
		_ = send(w.inbox) // a failed publish is silence: the next window re-sends
	}
	if rs.Max <= 0 || a.n.sub == nil {
		resend = nil // no notices taken: no re-sends
	}
	resp := w.resending(ctx.Done(), within, resend)
	a.Done(w, resp != nil)
	switch {
	case resp == nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case resp == nil && !deadline.IsZero() && !time.Now().Before(deadline):
		return nil, context.DeadlineExceeded
	case resp == nil:
		return nil, nats.ErrConnectionClosed
	case len(resp.Data) == 0 && resp.Header.Get("Status") == "503":
		return nil, nats.ErrNoResponders
	}
	return resp, nil
}

// resending is WaitDone calling resend (nil: never) each time the Mux's
// silence timer says w's window of silence passed.
func (w *Wait) resending(done <-chan struct{}, within time.Duration, resend func()) *nats.Msg {
	var expired <-chan time.Time
	if within > 0 {
		t := StartTimer(within)
		defer StopTimer(t)
		expired = t.C
	}
	var poke chan struct{}
	if resend != nil {
		poke = w.poke
	}
	for {
		select {
		case m := <-w.ch:
			return m
		case <-done:
			return nil
		case <-expired:
			return nil
		case <-poke:
			resend()
		}
	}
}

// notices is a Mux's running notices side: its subscription, and one
// timer for every wait's window of silence (none per wait), armed at at,
// by the soonest late of q's waits.
type notices struct {
	sub   *nats.Subscription
	mux   *Mux
	timer *time.Timer
	at    time.Time // zero: not armed
	q     silences
}

// silences are the waits with a window of silence, a min-heap on late.
type silences []*Wait

func (q silences) Len() int           { return len(q) }
func (q silences) Less(i, j int) bool { return q[i].late.Before(q[j].late) }
func (q silences) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].i, q[j].i = i, j
}
func (q *silences) Push(w any) {
	w.(*Wait).i = len(*q)
	*q = append(*q, w.(*Wait))
}
func (q *silences) Pop() any {
	w := (*q)[len(*q)-1]
	(*q)[len(*q)-1], *q = nil, (*q)[:len(*q)-1]
	return w
}

// drop ends w's re-sends, taking it out of q. The Mux's lock is held.
func (n *notices) drop(w *Wait) {
	if !w.due.IsZero() {
		heap.Remove(&n.q, w.i)
		w.due = time.Time{}
	}
}

// watch sets w's re-sends to rs, its first window starting now (none
// without the notices' subscription). w has none. The Mux's lock is held.
func (n *notices) watch(w *Wait, rs Resend) {
	w.rs, w.sent = rs, 0
	if rs.Max <= 0 || n.sub == nil {
		return
	}
	if w.poke == nil {
		w.poke = make(chan struct{}, 1)
	}
	select {
	case <-w.poke: // a former request's
	default:
	}
	n.window(w, time.Now(), rs.First)
}

// window starts w's window of silence of d at now, and arms the timer for
// its end: after d and up to 20 % more, at random, the timer's slack (up
// to a fiftieth of d late) included. A window is at least a millisecond
// (a caller's zero or negative one would spin fire, or panic rand.N).
// The Mux's lock is held.
func (n *notices) window(w *Wait, now time.Time, d time.Duration) {
	d, in := max(d, time.Millisecond), !w.due.IsZero()
	w.due = now.Add(d + rand.N(d/5-d/50+1))
	w.late = w.due.Add(d / 50)
	if in {
		heap.Fix(&n.q, w.i)
	} else {
		heap.Push(&n.q, w)
	}
	n.arm(now)
}

// arm has the timer fire by the soonest late, at the end of its wait's
// window and not before its slack from now (so the windows that end close
// together share a fire). The Mux's lock is held.
func (n *notices) arm(now time.Time) {
	if len(n.q) == 0 {
		return
	}
	w := n.q[0]
	at := w.due
	if soon := now.Add(w.late.Sub(w.due)); at.Before(soon) {
		at = soon
	}
	switch {
	case !n.at.IsZero() && !at.Before(n.at):
		return // armed for sooner
	case n.timer == nil:
		n.timer = time.AfterFunc(at.Sub(now), n.fire)
	default:
		n.timer.Reset(at.Sub(now))
	}
	n.at = at
}

// fire tells the waits whose window of silence passed to re-send, up to
// their Max, starting their next window: it takes them off q's top while
// the top is due, so it costs what is due (a due wait behind one that is
// not is told at the next fire, by its late), then arms the timer for the
// new top. Meanwhile the timer counts as armed for now: the windows it
// starts do not arm it.
func (n *notices) fire() {
	a := n.mux
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	n.at = now
	for len(n.q) > 0 && !n.q[0].due.After(now) {
		w := n.q[0]
		select {
		case w.poke <- struct{}{}:
			w.sent++
		default: // the last one not taken yet
		}
		if w.sent < w.rs.Max {
			n.window(w, now, w.rs.First)
		} else {
			n.drop(w)
		}
	}
	n.at = time.Time{}
	n.arm(now)
}

// take counts m, on an inbox + bus.RunningSuffix, for the wait of that
// inbox when it decodes as io.toolbus.call.running of the wait's reply id.
func (n *notices) take(m *nats.Msg) {
	a := n.mux
	inbox, _ := strings.CutSuffix(m.Subject, bus.RunningSuffix)
	e, err := bus.Decode(m)
	if err != nil || e.Type != bus.TypeCallRunning || e.ReplyID == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.waiting[inbox]; w != nil && !w.due.IsZero() && w.rs.ReplyID == e.ReplyID {
		n.window(w, time.Now(), w.rs.AfterNotice) // it may end sooner than the window it replaces
	}
}

// newInbox is an inbox no wait has now, carved out of a shared block. a.mu is held.
func (a *Mux) newInbox() string {
	for {
		a.seq++
		n := a.seq
		if a.opts.Unguessable {
			n = rand.Uint64()
		}
		inbox := inboxes.Make(len(a.prefix)+13, func(b []byte) []byte { // 13: base 36 digits of a uint64
			return strconv.AppendUint(append(b, a.prefix...), n, 36)
		})
		if _, taken := a.waiting[inbox]; !taken {
			return inbox
		}
	}
}

// inboxes are the blocks the inboxes are carved out of.
var inboxes slab.Pool

func (a *Mux) subscribe() {
	if a.nc == nil { // a test's Mux: replies are delivered by hand
		a.prefix = "_INBOX.t."
		return
	}
	a.prefix = a.nc.NewInbox() + "."
	if a.sub, a.err = a.nc.Subscribe(a.prefix+"*", a.deliver); a.err == nil && a.opts.Progress != nil {
		if a.p.sub, a.err = a.nc.Subscribe(a.prefix+"*"+bus.ProgressSuffix, a.deliver); a.err == nil {
			a.err = a.p.sub.SetPendingLimits(progressPendingMsgs, progressPendingBytes)
		}
	}
	if a.err == nil && a.opts.Notices {
		a.n.mux = a
		if a.n.sub, a.err = a.nc.Subscribe(a.prefix+"*"+bus.RunningSuffix, a.n.take); a.err == nil {
			a.err = a.n.sub.SetPendingLimits(progressPendingMsgs, progressPendingBytes)
		}
	}
	if a.err != nil {
		return
	}
	var status []nats.Status
	if a.opts.Reset {
		status = append(status, nats.RECONNECTING)
	}
	if a.opts.Reset || a.opts.EndOnClose {
		a.status = a.nc.StatusChanged(append(status, nats.CLOSED)...)
		go a.endOn(a.status)
	}
}

// Unsubscribe unsubscribes the Mux and ends the waits under way with a nil
// reply; Await then fails with nats.ErrConnectionClosed.
func (a *Mux) Unsubscribe() {
	a.once.Do(func() {}) // no subscription from now on
	a.endWaits(true)
	for _, s := range []*nats.Subscription{a.sub, a.p.sub, a.n.sub} {
		if s != nil {
			_ = s.Unsubscribe()
		}
	}
	if a.status != nil {
		a.nc.RemoveStatusListener(a.status)
	}
}

// deliver hands a reply to the wait for it, once; a reply that no wait
// is registered for (late, or not ours) is dropped. Progress (on its own
// subscription) goes to Options.Progress, outside the lock.
func (a *Mux) deliver(m *nats.Msg) {
	inbox, progress := strings.CutSuffix(m.Subject, bus.ProgressSuffix)
	if progress = progress && a.opts.Progress != nil; !progress {
		inbox = m.Subject
	}
	a.mu.Lock()
	w := a.waiting[inbox]
	if progress {
		a.p.started++
		var tag any
		if w != nil && w.tag != nil {
			a.p.relaying, tag = w, w.tag // in hand
		}
		a.mu.Unlock()
		if tag != nil {
			a.opts.Progress(tag, m)
		}
		n := a.p.counted()
		if tag == nil {
			n++ // no wait for it (stray, or its wait ended): dropped here
		}
		if n > 0 && a.opts.ProgressDropped != nil {
			a.opts.ProgressDropped(n)
		}
		return
	}
	switch {
	case w != nil && w.tag != nil && a.p.sub != nil: // awaited for its progress until Done
		if w.replied {
			w = nil
		} else {
			w.replied = true
			a.p.mark(w)
		}
	default:
		delete(a.waiting, m.Subject)
		a.settle()
	}
	if w != nil {
		a.n.drop(w) // no re-send follows a reply
	}
	a.mu.Unlock()
	if w != nil {
		w.ch <- m
	}
}

// Done ends w's wait, replied when its reply was taken from C (then no
// lock, unless tagged: deliver or endOn took w out of waiting). A wait whose
// reply may still come to its channel is not reused; one that ended before
// its reply came is reused with a new inbox. With Options.Progress, the
// progress read before its reply (or, with none, before Done) is handed on
// with w's tag before Done returns, and none after: a durable call's
// result comes another way, after its progress (docs/protocol.md 5.3).
func (a *Mux) Done(w *Wait, replied bool) {
	if replied && w.tag == nil {
		a.free.Put(w)
		return
	}
	a.mu.Lock()
	if w.tag != nil && a.p.sub != nil && !w.replied {
		a.p.mark(w)
	}
	for w.tag != nil && a.p.sub != nil && a.p.behind(w) && !a.closed {
		a.p.caught.Wait()
	}
	waiting := a.waiting[w.inbox] == w
	if waiting {
		delete(a.waiting, w.inbox)
		a.n.drop(w)
	}
	for a.p.relaying == w {
		a.p.caught.Wait()
	}
	a.settle()
	reuse := replied || waiting && !w.replied
	a.mu.Unlock()
	if reuse {
		if !replied {
			w.inbox = ""
		}
		w.tag, w.replied = nil, false
		a.free.Put(w)
	}
}

// settle closes idle when nothing is awaited any more. a.mu is held.
func (a *Mux) settle() {
	if a.idle != nil && len(a.waiting) == 0 {
		close(a.idle)
		a.idle = nil
	}
}

// Flush waits until nothing registered so far is awaited, or ctx ends.
func (a *Mux) Flush(ctx context.Context) error {
	a.mu.Lock()
	if len(a.waiting) == 0 {
		a.mu.Unlock()
		return nil
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	idle := a.idle
	a.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// endOn ends every wait with a nil reply on reconnect (Reset) and close
// (EndOnClose), until closed; such a wait's waiter calls Forget.
func (a *Mux) endOn(status <-chan nats.Status) {
	for s := range status {
		closed := s == nats.CLOSED
		if closed && !a.opts.EndOnClose {
			return
		}
		a.endWaits(closed)
		if closed {
			return
		}
	}
}

// Wait waits for w's reply until ctx ends or within (when set) passes; nil
// when none came, or the Mux ended the wait (Reset, EndOnClose).
func (w *Wait) Wait(ctx context.Context, within time.Duration) *nats.Msg {
	return w.WaitDone(ctx.Done(), within)
}

// WaitDone is Wait until done is closed (nil: never) rather than a
// context's end.
func (w *Wait) WaitDone(done <-chan struct{}, within time.Duration) *nats.Msg {
	return w.resending(done, within, nil)
}

// timers are the stopped timers of the waits, to start again.
var timers sync.Pool

// StartTimer is a timer from the pool that fires after d; StopTimer
// stops it and puts it back.
func StartTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// StopTimer stops t and puts it back in the pool.
func StopTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// endWaits ends every wait registered with a nil reply; closed: none
// registers from now on.
func (a *Mux) endWaits(closed bool) {
	a.mu.Lock()
	a.closed = a.closed || closed
	ws := make([]*Wait, 0, len(a.waiting))
	for inbox, w := range a.waiting {
		if !w.replied { // a replied one's reply is in its channel
			ws = append(ws, w)
		}
		delete(a.waiting, inbox)
		w.due = time.Time{} // out of the heap, emptied below
	}
	a.n.q = nil
	a.settle()
	a.mu.Unlock()
	a.p.caught.Broadcast() // a Done waiting for progress that will not come now
	for _, w := range ws {
		w.ch <- nil
	}
}
