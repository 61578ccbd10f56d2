package facade

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// table is the (session, user) MCP servers a facade keeps, bounded by
// MaxSessions (the least recently used idle one makes room) and swept of
// those idle for longer than Idle (docs/mcp.md "Idle eviction"). At most
// MaxSessions: a scan of them all costs less than keeping an order.
type table struct {
	closing context.Context // the facade's: nothing is added once it ends
	idle    time.Duration
	max     int
	evicted *atomic.Int64 // MCP servers dropped (Facade.evicted)

	mu       sync.Mutex
	sessions map[key]*session
}

// errFull: every kept MCP server is busy and MaxSessions are kept.
var errFull = errors.New("facade: too many MCP sessions in use; retry later")

func newTable(closing context.Context, idle time.Duration, max int, evicted *atomic.Int64) *table {
	return &table{closing: closing, idle: idle, max: max, evicted: evicted, sessions: map[key]*session{}}
}

func (t *table) use(k key) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.sessions[k]
	if !ok {
		return nil
	}
	t.touchLocked(s, 1)
	return s
}

// add keeps s as k's MCP server, counts a request on it and calls start
// (its polling), all under the lock; it returns the one made meanwhile by
// another request instead, counted the same, and errFull when max are
// kept and all are busy.
func (t *table) add(k key, s *session, start func()) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing.Err() != nil {
		return nil, fmt.Errorf("facade: closed")
	}
	if other, ok := t.sessions[k]; ok {
		t.touchLocked(other, 1)
		return other, nil
	}
	if len(t.sessions) >= t.max && !t.evictOneLocked() {
		return nil, errFull
	}
	t.sessions[k] = s
	t.touchLocked(s, 1)
	start()
	return s, nil
}

func (t *table) release(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touchLocked(s, -1)
}

func (t *table) touchLocked(s *session, delta int) {
	s.active += delta
	s.last = time.Now()
}

// busyLocked reports whether s serves a request or holds a call waiting
// for its host user: it is not dropped then (tasks are the facade's, and
// survive it).
func (t *table) busyLocked(s *session) bool {
	return s.active > 0 || s.confirms.busy()
}

func (t *table) evictOneLocked() bool {
	var lru *session
	for _, s := range t.sessions {
		if !t.busyLocked(s) && (lru == nil || s.last.Before(lru.last)) {
			lru = s
		}
	}
	if lru != nil {
		t.dropLocked(lru)
	}
	return lru != nil
}

// dropLocked forgets s and stops its polling. A client of it that comes
// back gets HTTP 404 for its MCP session id, and initialises again.
func (t *table) dropLocked(s *session) {
	k := key{s.id, s.user, s.policy, s.stdio}
	delete(t.sessions, k)
	s.cancel()
	t.evicted.Add(1)
}

func (t *table) sweep() {
	every := min(t.idle/2, time.Minute)
	every = max(every, 10*time.Millisecond)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-t.closing.Done():
			return
		case now := <-tk.C:
			t.dropIdle(now)
		}
	}
}

func (t *table) dropIdle(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.sessions {
		if now.Sub(s.last) > t.idle && !t.busyLocked(s) {
			t.dropLocked(s)
		}
	}
}

func (t *table) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}

// changed marks the listings of bus session id (every one for "") to be
// compared with the bus at once.
func (t *table) changed(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	mark := func(s *session) {
		select {
		case s.dirty <- struct{}{}:
		default:
		}
	}
	for _, s := range t.sessions {
		if id == "" || s.id == id {
			mark(s)
		}
	}
}
