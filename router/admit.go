package router

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// Admission (docs/protocol.md 1, busy): a message is handled in one of
// MaxInflight slots. When every slot is taken, a batch or tools query with
// a reply subject waits for one, at most QueueWait and with at most
// MaxQueued others; past either it is answered busy at once, from the
// subscription's callback, so the callback never blocks and the NATS
// client's pending buffer never fills and drops. Other messages (worker
// results and registrations, answers, cancels, and batches published
// without a reply subject, which have nobody to tell) wait for a slot in
// the callback: back-pressure, as before.

// Defaults of the admission queue.
const (
	DefaultQueueWait = 2 * time.Second
)

// Pending limits of the subscriptions: far above what the callbacks let
// accumulate, so that the client library's slow-consumer drop (silent to
// the sender) stays out of reach; a drop is still logged (watchDropped).
const (
	pendingMsgs  = 1 << 20
	pendingLimit = 256 << 20
)

type admission struct {
	waiting atomic.Int64
	busy    atomic.Int64 // busy replies sent
}

// sheds reports whether a message on subject may be answered busy.
func (r *Router) sheds(subject string) bool {
	return subject == r.subj.All("call") || subject == r.subj.All("tools")
}

// admit takes a slot for m, waiting as described above; false means m was
// answered busy and must not be handled.
func (r *Router) admit(m *nats.Msg, shed bool) bool {
	select {
	case r.sem <- struct{}{}:
		return true
	default:
	}
	if !shed || m.Reply == "" {
		r.sem <- struct{}{} // back-pressure
		return true
	}
	return false
}

// wait queues m for a slot for at most QueueWait, then runs h on it; it is
// called only after admit found no slot for a sheddable message, and
// answers busy when the queue is full or the wait ends.
func (r *Router) wait(h func(*nats.Msg), m *nats.Msg) {
	if r.adm.waiting.Add(1) > int64(r.cfg.MaxQueued) {
		r.adm.waiting.Add(-1)
		r.busy(m)
		r.work.Done()
		return
	}
	go func() {
		t := time.NewTimer(r.cfg.QueueWait)
		defer t.Stop()
		select {
		case r.sem <- struct{}{}:
			r.adm.waiting.Add(-1)
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed { // draining: another router of the queue group takes the re-send
				<-r.sem
				r.busy(m)
				r.work.Done()
				return
			}
			r.handle(h, m)
		case <-t.C:
			r.adm.waiting.Add(-1)
			r.busy(m)
			r.work.Done()
		}
	}()
}

// busy answers m busy: nothing of it ran.
func (r *Router) busy(m *nats.Msg) {
	r.adm.busy.Add(1)
	r.m.Rejected.WithLabelValues(bus.CodeBusy).Inc()
	if err := bus.RespondError(r.nc, m, r.source, &bus.Error{Code: bus.CodeBusy, Message: bus.BusyText}); err != nil {
		r.log.Warn("router: busy reply failed", "err", err)
	}
}

// BusyReplies counts the busy replies this router has sent.
func (r *Router) BusyReplies() int64 { return r.adm.busy.Load() }

// watchDropped logs messages the NATS client dropped as a slow consumer
// (which the pending limits above should make impossible): their senders
// got no reply.
func (r *Router) watchDropped(last map[*nats.Subscription]int) {
	r.mu.Lock()
	subs := r.subs
	r.mu.Unlock()
	for _, s := range subs {
		n, err := s.Dropped()
		if err != nil || n <= last[s] {
			continue
		}
		r.log.Error("router: the NATS client dropped messages as a slow consumer; their senders got no reply", "subject", s.Subject, "dropped", n-last[s])
		r.m.Rejected.WithLabelValues("dropped").Add(float64(n - last[s]))
		last[s] = n
	}
}
