package router

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/groups"
)

// sessionCache decides, per run of a batch, whether the session must be
// read from KV (docs/protocol.md 4.2). A batch without a session revision
// is read as before. A batch that echoes the revision of an earlier reply
// or listing (sessionrev) skips the read when the router's cached session
// is at least that revision and the sessions watch has seen no newer
// write of it: the agent has then been told of every write it depends on,
// and this router holds them.
//
// The cache itself is groups.Store's LRU, fed by each read and by the
// revision each write returns. The watch here (updates only, no values)
// only marks cached sessions stale: a write through another router counts
// as soon as the watch delivers it, and a batch carrying that write's
// revision is read at once whatever the watch says.
type sessionCache struct {
	groups *groups.Store
	kv     jetstream.KeyValue // P_sessions; nil: no watch, every batch is read

	mu     sync.Mutex
	newer  map[string]uint64 // the latest revision the watch delivered per session
	floor  uint64            // a cached session older than this may be stale (newer overflowed)
	last   uint64            // the newest revision the watch delivered, of any session
	missed map[string]uint64 // sessions read absent, with last as it was before the read
	limit  int
	ready  bool // the watch runs

	stop  context.CancelFunc
	done  chan struct{}
	reads atomic.Int64 // batch runs that read the session from KV
	skips atomic.Int64 // batch runs that did not
}

// newSessionCache returns the cache over gs; limit bounds the revisions
// the watch keeps (the sessions the router caches, at least 1024).
func newSessionCache(gs *groups.Store, kv jetstream.KeyValue, limit int) *sessionCache {
	return &sessionCache{groups: gs, kv: kv, newer: map[string]uint64{}, missed: map[string]uint64{}, limit: max(limit, 1024)}
}

// start runs the watch until ctx ends or stop. Without a watch every batch
// is read from KV, which is always correct.
func (s *sessionCache) start(ctx context.Context) error {
	if s.kv == nil {
		return nil
	}
	ctx, s.stop = context.WithCancel(ctx)
	// Every write before the watch is one a later read sees: the bucket's
	// last revision now counts as delivered (missCurrent).
	if st, err := s.kv.Status(ctx); err == nil {
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			s.last = bs.StreamInfo().State.LastSeq
		}
	}
	w, err := s.kv.Watch(ctx, ">", jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		s.stop()
		return err
	}
	// Deletes and purges come as entries too, at their own revision: the
	// cached session is then stale, and the next batch reads it gone.
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					s.mu.Lock()
					s.ready = false // no more news: read every batch
					s.mu.Unlock()
					return
				}
				if e != nil {
					s.seen(e.Key(), e.Revision())
				}
			}
		}
	}()
	return nil
}

// close ends the watch; safe to call twice.
func (s *sessionCache) close() {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
}

// seen records that session id was written at revision rev.
func (s *sessionCache) seen(id string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.newer) >= s.limit {
		// Past the bound every cached session older than the newest
		// revision seen counts as stale until it is read again.
		for _, r := range s.newer {
			s.floor = max(s.floor, r)
		}
		clear(s.newer)
	}
	s.newer[id] = max(s.newer[id], rev)
	s.last = max(s.last, rev)
}

// current reports whether a cached session at revision have holds every
// write of it the watch has seen.
func (s *sessionCache) current(id string, have uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready && have >= s.floor && have >= s.newer[id]
}

// snapshot makes the router's view of session id current for a batch run:
// a read from KV, unless rev (the batch's sessionrev, 0 when absent) allows
// the cached session (canSkip) or the cached miss of a session never
// written (missCurrent).
func (s *sessionCache) snapshot(ctx context.Context, id string, rev uint64) *groups.Session {
	cur := s.groups.Session(id)
	if canSkip(rev, cur.Revision(), s.current(id, cur.Revision())) || cur.Revision() == 0 && s.missCurrent(id, rev) {
		s.skips.Add(1)
		return cur
	}
	s.reads.Add(1)
	ctx, cancel := context.WithTimeout(ctx, sessionReadTimeout)
	defer cancel()
	s.mu.Lock()
	before, ready := s.last, s.ready
	s.mu.Unlock()
	sess, absent := s.groups.Read(ctx, id)
	if absent && ready {
		s.miss(id, before)
	}
	return sess
}

// miss records that session id was read absent when the watch had
// delivered every write up to revision at.
func (s *sessionCache) miss(id string, at uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.missed) >= s.limit {
		clear(s.missed) // forgotten misses are read again
	}
	s.missed[id] = at
}

// missCurrent reports whether a batch that sent revision asked may be
// served the defaults of session id, never written (docs/protocol.md 4.2):
// this router read it absent once its watch ran, the watch has delivered
// every write up to asked (so every write the agent was told of), and no
// write of id since that read.
func (s *sessionCache) missCurrent(id string, asked uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.missed[id]
	return ok && s.ready && asked > 0 && asked <= s.last && s.floor <= at && s.newer[id] <= at
}

// sessionReadTimeout bounds one read of a batch's session; past it the
// cache serves (groups.Refresh falls back to it on an error).
const sessionReadTimeout = 5 * time.Second

// canSkip is the rule of docs/protocol.md 4.2: a batch that sent revision
// asked may be served from a cached session at revision have when asked is
// set, have is at least asked, and the watch knows of nothing newer.
func canSkip(asked, have uint64, current bool) bool {
	return asked > 0 && have >= asked && current
}

// revision is the session's KV revision as this router knows it; for a
// session never written that this router read absent and whose miss still
// holds, the revision of the miss: the newest revision of the bucket the
// watch has delivered (docs/protocol.md 4.2). 0 when none is known.
func (s *sessionCache) revision(id string) uint64 {
	if rev := s.groups.Session(id).Revision(); rev > 0 {
		return rev
	}
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if s.missCurrent(id, last) {
		return last
	}
	return 0
}
