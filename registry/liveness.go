package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// liveness is what a router knows of the workers of P_workers: one beat
// per <tool>.<worker>, by the local clock (docs/registry.md), fed by the
// watch, by the beats this router stores or could not store, and by a
// probe of the bucket at most once a heartbeat per tool. Safe for
// concurrent use.
type liveness struct {
	kv        jetstream.KeyValue
	heartbeat time.Duration
	now       func() time.Time
	health    *store.Health  // where liveness writes note a full store
	version   *atomic.Uint64 // the Registry's, bumped on every change

	mu      sync.RWMutex
	beats   map[string]map[string]beat // tool → worker → last beat
	probed  map[string]time.Time       // when probe last listed a tool's workers in KV
	trouble time.Time                  // when a liveness write last failed
}

// beat is what a router knows of one worker serving one tool.
type beat struct {
	at       time.Time // local time the beat was seen: no clock is compared with the server's
	rev      uint64
	left     bool     // the worker said it is leaving
	inflight []string // calls of the tool the worker was running (bus.CallKey); nil: it does not say
	binary   bool     // the worker takes io.toolbus.exec in binary mode (docs/protocol.md 5.1)
}

// cutoff is the oldest beat that still makes a worker live.
func (l *liveness) cutoff() time.Time { return l.now().Add(-3 * l.heartbeat) }

func (l *liveness) applyWorker(e jetstream.KeyValueEntry) {
	tool, worker, ok := strings.Cut(e.Key(), ".")
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		l.setBeat(tool, worker, beat{rev: e.Revision()}, true)
		return
	}
	v := bus.DecodeWorkerBeat(e.Value())
	l.setBeat(tool, worker, beat{at: l.now(), rev: e.Revision(), left: v.Left, inflight: v.InFlight, binary: v.Binary}, false)
}

// Troubled reports whether a liveness write failed within the last four
// heartbeats: the workers bucket could not take beats (a leader election, a
// node down), so beats that look missed may never have been stored, and
// nobody should be declared gone for them.
func (l *liveness) Troubled(now time.Time) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return !l.trouble.IsZero() && now.Sub(l.trouble) < 4*l.heartbeat
}

// MayHold reports whether a live worker of the tool may be running the call
// key (bus.CallKey): one said so in its latest beat, or one does not report
// its calls in flight at all (a worker written from docs/protocol.md alone), so
// nobody can tell.
func (l *liveness) MayHold(tool, key string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoff()
	for _, b := range l.beats[tool] {
		if !b.left && b.at.After(cutoff) && (b.inflight == nil || slices.Contains(b.inflight, key)) {
			return true
		}
	}
	return false
}

// BinaryExec reports whether every live worker of the tool takes
// io.toolbus.exec in CloudEvents binary mode (docs/protocol.md 5.1): one
// of the previous revision in the queue group, or none live, means
// structured mode.
func (l *liveness) BinaryExec(tool string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoff()
	n := 0
	for _, b := range l.beats[tool] {
		if b.left || !b.at.After(cutoff) {
			continue
		}
		if !b.binary {
			return false
		}
		n++
	}
	return n > 0
}

// record stores one beat of worker for tool and records it. A beat the
// bucket refused still counts here (docs/registry.md): the worker is live
// in this router's cache whatever the bucket took, and a full store is
// not an error (the router reports it in its status).
func (l *liveness) record(ctx context.Context, tool, worker string, bv bus.WorkerBeat) error {
	key := tool + "." + worker
	rev, err := l.kv.Put(ctx, key, bv.Encode())
	full := l.health.Note(err)
	if err != nil {
		// This router saw the beat: the worker is live whatever the
		// bucket took. The cache keeps it so (at the revision it
		// holds), so that a store that refuses writes does not make
		// every tool look dead here; the other routers see the worker
		// again when the bucket takes beats again.
		l.mu.Lock()
		l.trouble = l.now()
		l.mu.Unlock()
		l.sawBeat(tool, worker, bv.InFlight, bv.Binary)
		if full {
			return nil // the worker is live; the router reports the store full (status)
		}
		return fmt.Errorf("registry: liveness %s: %w", key, err)
	}
	l.setBeat(tool, worker, beat{at: l.now(), rev: rev, inflight: bv.InFlight, binary: bv.Binary}, false)
	return nil
}

// sawBeat records a beat that this router took but could not store: the
// worker is live from now, at the revision the cache holds.
func (l *liveness) sawBeat(tool, worker string, inflight []string, binary bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.beats[tool]
	if m == nil {
		m = map[string]beat{}
		l.beats[tool] = m
	}
	b := m[worker]
	b.at, b.left, b.inflight, b.binary = l.now(), false, inflight, binary
	m[worker] = b
	l.version.Add(1)
}

// setBeat records b unless a newer revision is known already; remove drops
// the entry instead (a delete or purge).
func (l *liveness) setBeat(tool, worker string, b beat, remove bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.beats[tool]
	if old, ok := m[worker]; ok && old.rev >= b.rev {
		return
	}
	l.version.Add(1)
	if remove {
		delete(m, worker)
		if len(m) == 0 {
			delete(l.beats, tool)
		}
		return
	}
	if m == nil {
		m = map[string]beat{}
		l.beats[tool] = m
	}
	m[worker] = b
}

// Live reports whether a call to the tool can be served: it is external, or
// at least one worker has beaten within three heartbeats.
func (l *liveness) Live(t *Tool) bool {
	return t.Def.External || l.liveExcept(t.Def.Name, "")
}

// liveExcept reports whether a worker other than except beat for tool
// within three heartbeats.
func (l *liveness) liveExcept(tool, except string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoff()
	for w, b := range l.beats[tool] {
		if w != except && !b.left && b.at.After(cutoff) {
			return true
		}
	}
	return false
}

// Workers returns the number of live workers per tool.
func (l *liveness) Workers() map[string]int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoff()
	out := map[string]int{}
	for tool, ws := range l.beats {
		for _, b := range ws {
			if !b.left && b.at.After(cutoff) {
				out[tool]++
			}
		}
	}
	return out
}

// leave marks a worker gone at once: its liveness entries are overwritten
// with a "left" value (not deleted, so that a heartbeat still in flight, with
// an older revision, cannot bring it back in any router's cache).
func (l *liveness) leave(ctx context.Context, worker string) error {
	l.mu.RLock()
	var tools []string
	for tool, ws := range l.beats {
		if _, ok := ws[worker]; ok {
			tools = append(tools, tool)
		}
	}
	l.mu.RUnlock()
	for _, tool := range tools {
		rev, err := l.kv.Put(ctx, tool+"."+worker, bus.WorkerLeft)
		if err != nil {
			return fmt.Errorf("registry: leave %s.%s: %w", tool, worker, err)
		}
		l.setBeat(tool, worker, beat{rev: rev, left: true}, false)
	}
	return nil
}

// probe reads the beats of tool's workers from KV into the cache, at most
// once a heartbeat per tool: listing keys costs the server a consumer, and
// a tool whose workers are all gone may be called again and again.
func (l *liveness) probe(ctx context.Context, tool string) error {
	now := l.now()
	l.mu.Lock()
	recent := now.Sub(l.probed[tool]) < l.heartbeat
	if !recent {
		l.probed[tool] = now
	}
	l.mu.Unlock()
	if recent {
		return nil
	}
	keys, err := l.kv.ListKeysFiltered(ctx, tool+".*")
	if err != nil {
		return err
	}
	for key := range keys.Keys() {
		if e, err := l.kv.Get(ctx, key); err == nil {
			l.applyWorker(e)
		}
	}
	return nil
}
