package store

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// acks are the replies to a KV's compare-and-set writes, or to a
// Publisher's messages (OwnAcks), on one subscription of their own (as
// nats.go's requests share one, and jetstream's asynchronous publishes
// another): a write waits for its acknowledgement on a pooled channel,
// bounded by the caller's context and a pooled timer, where a request
// would take a channel, and a bounded one a context and a timer, of its
// own, and an asynchronous publish a future with two channels, a timer and
// an encoding/json decode of the acknowledgement.
type acks struct {
	nc *nats.Conn
	// reset: a reconnect ends every wait with a nil reply, as it fails
	// jetstream's asynchronous publishes (the replies of the old
	// connection never come). A Publisher's; a KV's writes wait out their
	// bound instead, as before.
	reset   bool
	once    sync.Once
	prefix  string // the subscription's inbox, with a trailing dot
	err     error
	mu      sync.Mutex
	seq     uint64
	waiting map[string]*ackWait
	idle    chan struct{} // closed once nothing is awaited (Publisher.Flush)
	free    sync.Pool
}

// ackWait is one write's wait for its acknowledgement. A wait whose reply
// came is reused with its inbox (one request, one reply); any other takes a
// new inbox when it is reused, as a late reply may still come to the old.
type ackWait struct {
	inbox string
	ch    chan *nats.Msg
}

// await registers a wait, subscribing on first use. With max set, it
// returns nil, and no error, while max waits are registered.
func (a *acks) await(max int) (*ackWait, error) {
	a.once.Do(func() {
		a.prefix = a.nc.NewInbox() + "."
		a.waiting = map[string]*ackWait{}
		_, a.err = a.nc.Subscribe(a.prefix+"*", a.deliver)
		if a.err == nil && a.reset {
			go a.resetOn(a.nc.StatusChanged(nats.RECONNECTING, nats.CLOSED))
		}
	})
	if a.err != nil {
		return nil, a.err
	}
	w, _ := a.free.Get().(*ackWait)
	if w == nil {
		w = &ackWait{ch: make(chan *nats.Msg, 1)}
	}
	var buf [64]byte // the inbox and a number: one allocation, the string
	a.mu.Lock()
	if max > 0 && len(a.waiting) >= max {
		a.mu.Unlock()
		a.free.Put(w)
		return nil, nil
	}
	if w.inbox == "" {
		a.seq++
		w.inbox = string(strconv.AppendUint(append(buf[:0], a.prefix...), a.seq, 36))
	}
	a.waiting[w.inbox] = w
	a.mu.Unlock()
	return w, nil
}

// deliver hands a reply to the write that waits for it, once.
func (a *acks) deliver(m *nats.Msg) {
	a.mu.Lock()
	w := a.waiting[m.Subject]
	delete(a.waiting, m.Subject)
	a.settle()
	a.mu.Unlock()
	if w != nil {
		w.ch <- m
	}
}

// done ends w's wait, replied when its reply was taken. A wait whose reply
// may still come (deliver took it from waiting, but it ended first) is
// not reused; one that ended before its reply came is reused with a new
// inbox.
func (a *acks) done(w *ackWait, replied bool) {
	a.mu.Lock()
	_, waiting := a.waiting[w.inbox]
	delete(a.waiting, w.inbox)
	a.settle()
	a.mu.Unlock()
	if waiting || replied {
		if !replied {
			w.inbox = ""
		}
		a.free.Put(w)
	}
}

// settle closes idle when nothing is awaited any more. a.mu is held.
func (a *acks) settle() {
	if a.idle != nil && len(a.waiting) == 0 {
		close(a.idle)
		a.idle = nil
	}
}

// flush waits until nothing registered so far is awaited, or ctx ends.
func (a *acks) flush(ctx context.Context) error {
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

// resetOn ends every wait with a nil reply each time the connection starts
// to reconnect, until it is closed (as jetstream's publisher does). Its
// waiter gives the wait a new inbox (the message may yet be sent, from
// nats.go's reconnect buffer, and answered).
func (a *acks) resetOn(status <-chan nats.Status) {
	for s := range status {
		if s == nats.CLOSED {
			return
		}
		a.mu.Lock()
		ws := make([]*ackWait, 0, len(a.waiting))
		for inbox, w := range a.waiting {
			ws = append(ws, w)
			delete(a.waiting, inbox)
		}
		a.settle()
		a.mu.Unlock()
		for _, w := range ws {
			w.ch <- nil
		}
	}
}

// wait waits for w's reply until ctx ends or within (when set) passes.
func (w *ackWait) wait(ctx context.Context, within time.Duration) *nats.Msg {
	var expired <-chan time.Time
	if within > 0 {
		t := startTimer(within)
		defer stopTimer(t)
		expired = t.C
	}
	select {
	case m := <-w.ch:
		return m
	case <-ctx.Done():
	case <-expired:
	}
	return nil
}

// timers are the stopped timers of the waits for acknowledgements (a
// stopped timer's channel holds nothing, so it can be started again).
var timers sync.Pool

// startTimer is a timer from the pool that fires after d; stopTimer
// stops it and puts it back.
func startTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func stopTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
