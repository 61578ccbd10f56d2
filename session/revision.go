package session

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Revisions decides, per run of a batch, whether the session must be
// read from KV (docs/protocol.md 4.2). A batch without a session revision
// is read as before. A batch that echoes the revision of an earlier reply
// or listing (sessionrev) skips the read when the router's cached session
// is at least that revision and the sessions watch has seen no newer
// write of it: the agent has then been told of every write it depends on,
// and this router holds them.
//
// The cache itself is Store's LRU, fed by each read and by the
// revision each write returns. The watch here (updates only, no values)
// only marks cached sessions stale: a write through another router counts
// as soon as the watch delivers it, and a batch carrying that write's
// revision is read at once whatever the watch says.
type Revisions struct {
	groups *Store
	kv     jetstream.KeyValue // P_sessions; nil: no watch, every batch is read

	mu     sync.Mutex
	newer  map[string]uint64 // the latest revision the watch delivered per session
	floor  uint64            // a cached session older than this may be stale (newer overflowed)
	last   uint64            // the newest revision the watch delivered, of any session
	missed map[string]uint64 // sessions read absent, with last as it was before the read
	limit  int
	ready  bool // the watch runs

	stop context.CancelFunc
	done chan struct{}
}

// NewRevisions returns the revision view over gs; limit bounds the
// revisions the watch keeps (the sessions the router caches, at least 1024).
func NewRevisions(gs *Store, kv jetstream.KeyValue, limit int) *Revisions {
	return &Revisions{groups: gs, kv: kv, newer: map[string]uint64{}, missed: map[string]uint64{}, limit: max(limit, 1024)}
}

// Start runs the watch until ctx ends or Stop. Without a watch every batch
// is read from KV, which is always correct.
func (s *Revisions) Start(ctx context.Context) error {
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

// Stop ends the watch and waits for it until ctx ends; safe to call
// twice.
func (s *Revisions) Stop(ctx context.Context) error {
	if s.stop == nil {
		return nil
	}
	s.stop()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// seen records that session id was written at revision rev.
func (s *Revisions) seen(id string, rev uint64) {
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
func (s *Revisions) current(id string, have uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready && have >= s.floor && have >= s.newer[id]
}

// Snapshot makes the router's view of session id current for a batch run:
// a read from KV, unless rev (the batch's sessionrev, 0 when absent) allows
// the cached session (canSkip) or the cached miss of a session never
// written (missCurrent).
func (s *Revisions) Snapshot(ctx context.Context, id string, rev uint64) *Session {
	cur := s.groups.Session(id)
	if canSkip(rev, cur.Revision(), s.current(id, cur.Revision())) || cur.Revision() == 0 && s.missCurrent(id, rev) {
		return cur
	}
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
func (s *Revisions) miss(id string, at uint64) {
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
func (s *Revisions) missCurrent(id string, asked uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.missed[id]
	return ok && s.ready && asked > 0 && asked <= s.last && s.floor <= at && s.newer[id] <= at
}

// sessionReadTimeout bounds one read of a batch's session; past it the
// cache serves (Store.Refresh falls back to it on an error).
const sessionReadTimeout = 5 * time.Second

// canSkip is the rule of docs/protocol.md 4.2: a batch that sent revision
// asked may be served from a cached session at revision have when asked is
// set, have is at least asked, and the watch knows of nothing newer.
func canSkip(asked, have uint64, current bool) bool {
	return asked > 0 && have >= asked && current
}

// Revision is the session's KV revision as this router knows it; for a
// session never written that this router read absent and whose miss still
// holds, the revision of the miss: the newest revision of the bucket the
// watch has delivered (docs/protocol.md 4.2). 0 when none is known.
func (s *Revisions) Revision(id string) uint64 {
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
