package router

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// Notices says when a batch not yet answered gets its running notices
// (docs/protocol.md 3.2.1): First after the router took it, then every
// Every; zero fields mean 2 s and 5 s.
type Notices struct{ First, Every time.Duration }

// notices sends the running notices of the batches with a reply subject
// on one timer of the router's, armed for the earliest notice due, as the
// sweeper ends calls (callctx.go): a batch answered before its first
// notice costs a link and an unlink under the lock, no timer or allocation.
type notices struct {
	Notices
	events  eventPort
	mu      sync.Mutex
	head    *batch // the batches awaiting their reply, linked through note
	t       *time.Timer
	at      time.Time // when t fires; zero: not armed
	stopped bool      // the router drains: no more notices
	base    time.Time // the ticks' origin (arm)
}

// noticeLink is a batch's place among the notices' batches.
type noticeLink struct {
	prev, next *batch
	to         string    // the batch's reply subject; "" once unlinked
	due        time.Time // its next notice
}

func newNotices(cfg Notices, events eventPort) *notices {
	cfg.First, cfg.Every = cmp.Or(cfg.First, 2*time.Second), cmp.Or(cfg.Every, 5*time.Second)
	return &notices{Notices: cfg, events: events, base: time.Now()}
}

// add links b, which came with reply subject to, until drop.
func (n *notices) add(b *batch, to string) {
	if to == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	b.note = noticeLink{next: n.head, to: to, due: b.start.Add(n.First)}
	if n.head != nil {
		n.head.note.prev = b
	}
	n.head = b
	n.arm(b.note.due)
}

// drop unlinks b: no notice of it is sent once drop returns. Only b's
// goroutine sets note.to (add, drop): it reads it unlocked.
func (n *notices) drop(b *batch) {
	if b.note.to == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &b.note
	if l.prev != nil {
		l.prev.note.next = l.next
	} else {
		n.head = l.next
	}
	if l.next != nil {
		l.next.note.prev = l.prev
	}
	*l = noticeLink{}
}

// stop ends the notices for good (a drain).
func (n *notices) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopped = true
	if n.t != nil {
		n.t.Stop()
	}
}

// arm arms the timer for d, rounded up to a tick of Every/20, unless it is
// armed for then or sooner; n.mu is held. The batches due within a tick
// share its fire (a walk of them all): at most 20 fires per Every, however
// their starts spread.
func (n *notices) arm(d time.Time) {
	tick := max(n.Every/20, 1)
	if r := d.Sub(n.base) % tick; r > 0 { // monotonic, unlike Truncate
		d = d.Add(tick - r)
	}
	if !n.at.IsZero() && !d.Before(n.at) {
		return
	}
	n.at = d
	if n.t == nil {
		n.t = time.AfterFunc(time.Until(d), n.fire)
	} else {
		n.t.Reset(time.Until(d))
	}
}

// fire sends the notices due and arms the timer for the next. The lock is
// held while they are published (core NATS, buffered), so none follows
// its batch's drop, which comes before the reply.
func (n *notices) fire() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.at = time.Time{}
	if n.stopped {
		return
	}
	now := time.Now()
	var next time.Time
	for b := n.head; b != nil; b = b.note.next {
		if !now.Before(b.note.due) {
			n.send(b)
			b.note.due = now.Add(n.Every)
		}
		if next.IsZero() || b.note.due.Before(next) {
			next = b.note.due
		}
	}
	if !next.IsZero() {
		n.arm(next)
	}
}

// send publishes b's notice: the ids of its calls neither finished nor
// parked, in call order, the first 64. Never awaited, never retried.
func (n *notices) send(b *batch) {
	data := append(make([]byte, 0, 64), `{"running":[`...)
	b.mu.Lock()
	k := 0
	for _, c := range b.calls {
		if c.result != nil || slices.ContainsFunc(b.parked, func(p bus.Parked) bool { return p.ID == c.call.ID }) {
			continue
		}
		if k == bus.MaxCalls { // at most 64 ids (3.2.1), whatever --max-calls
			break
		}
		if k++; k > 1 {
			data = append(data, ',')
		}
		data = append(append(append(data, '"'), c.call.ID...), '"') // call ids are [A-Za-z0-9_-] (checkTurn)
	}
	b.mu.Unlock()
	data = append(data, "]}"...)
	if err := n.events.reply(b.note.to+bus.RunningSuffix, bus.TypeCallRunning, b.session, b.replyID, b.trace, data); err != nil {
		b.p.log.Debug("router: running notice not sent", "session", b.session, "reply", b.replyID, "err", err)
	}
}

// setParked sets what b parked, under its lock for the notices (send);
// not a method: batch keeps to 15.
func setParked(b *batch, ps []bus.Parked) {
	b.mu.Lock()
	b.parked = ps
	b.mu.Unlock()
}
