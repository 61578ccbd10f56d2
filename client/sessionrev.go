package client

import "sync"

// maxRevs bounds the sessions whose revision a Client remembers; past it
// the memory starts afresh (a batch without a revision is read as before).
const maxRevs = 4096

// sessionRevs remembers, per session, the session revision of the last
// reply or listing (docs/protocol.md 4.2), which Call and Publish send
// back as the batch's sessionrev so that a router whose cached session is
// at least as new skips reading it. A write this Client makes to the
// session by other means (an admin verb, an answer, which may add a rule)
// forgets it, so the next batch is read again and sees that write at once.
type sessionRevs struct {
	mu  sync.Mutex
	rev map[string]uint64
}

// get returns the revision to send for session; 0 when none is known.
func (s *sessionRevs) get(session string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev[session]
}

// saw records a revision a router reported for session; 0 is ignored, and
// an older revision never replaces a newer one.
func (s *sessionRevs) saw(session string, rev uint64) {
	if rev == 0 || session == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev == nil || len(s.rev) >= maxRevs {
		s.rev = map[string]uint64{}
	}
	s.rev[session] = max(s.rev[session], rev)
}

// forget drops what is known of session.
func (s *sessionRevs) forget(session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rev, session)
}
