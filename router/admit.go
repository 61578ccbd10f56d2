package router

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/life"
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

// DefaultQueueWait is Config.QueueWait's default.
const DefaultQueueWait = 2 * time.Second

// Pending limits of the subscriptions: far above what the callbacks let
// accumulate, so that the client library's slow-consumer drop (silent to
// the sender) stays out of reach; a drop is still logged (watchDropped).
const (
	pendingMsgs  = 1 << 20
	pendingLimit = 256 << 20
)

// admission hands out the router's MaxInflight slots.
type admission struct {
	*wire
	life      *life.Life
	sem       chan struct{}
	maxQueued int
	queueWait time.Duration

	waiting atomic.Int64
	busy    atomic.Int64 // busy replies sent
}

// admit takes a slot for m, waiting as described above; false means m was
// not given one and the caller queues it (wait). shed says whether m is a
// batch or tools query that may be answered busy.
func (a *admission) admit(m *nats.Msg, shed bool) bool {
	select {
	case a.sem <- struct{}{}:
		return true
	default:
	}
	if !shed || m.Reply == "" {
		a.sem <- struct{}{} // back-pressure
		return true
	}
	return false
}

// wait queues m for a slot, at most queueWait and behind at most maxQueued
// others, and runs run once it has one; else m is answered busy. The
// caller's Enter on the life is matched here when run does not run.
func (a *admission) wait(m *nats.Msg, run func()) {
	if a.waiting.Add(1) > int64(a.maxQueued) {
		a.waiting.Add(-1)
		a.refuse(m)
		return
	}
	go func() {
		t := time.NewTimer(a.queueWait)
		defer t.Stop()
		select {
		case a.sem <- struct{}{}:
			a.waiting.Add(-1)
			if a.life.Draining() { // another router of the queue group takes the re-send
				<-a.sem
				a.refuse(m)
				return
			}
			run()
		case <-t.C:
			a.waiting.Add(-1)
			a.refuse(m)
		}
	}()
}

// refuse answers m busy (docs/protocol.md 1) and ends its work.
func (a *admission) refuse(m *nats.Msg) {
	a.busy.Add(1)
	a.m.Rejected.WithLabelValues(bus.CodeBusy).Inc()
	if err := bus.RespondError(a.nc, m, a.source, &bus.Error{Code: bus.CodeBusy, Message: bus.BusyText}); err != nil {
		a.log.Warn("router: busy reply failed", "err", err)
	}
	a.life.Leave()
}

// BusyReplies counts the busy replies this router has sent.
func (r *Router) BusyReplies() int64 { return r.adm.busy.Load() }

// watchDropped logs and counts the messages the NATS client dropped on
// subs since the last look (last holds the counts seen).
func (a *admission) watchDropped(subs []*nats.Subscription, last map[*nats.Subscription]int) {
	for _, s := range subs {
		n, err := s.Dropped()
		if err != nil || n <= last[s] {
			continue
		}
		a.log.Error("router: the NATS client dropped messages as a slow consumer; their senders got no reply", "subject", s.Subject, "dropped", n-last[s])
		a.m.Rejected.WithLabelValues("dropped").Add(float64(n - last[s]))
		last[s] = n
	}
}
