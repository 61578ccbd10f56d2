package router

import (
	"cmp"
	"fmt"
	"strings"
	"sync"
)

// A session's share of the router's slots (docs/router.md "a session's
// share"): MaxSessionInflight per session, and sharedPool for the shared
// agent's sessions together; past either, busy at once.

// DefaultSessionShare is the share of a router with maxInflight slots when
// Config.MaxSessionInflight is zero: an eighth of the slots, but at least
// 16 (all of them on a router of 16 or fewer).
func DefaultSessionShare(maxInflight int) int {
	return max(maxInflight/8, min(maxInflight, 16))
}

// sharedPool is the shared agent's sessions' part of the slots: three quarters.
func sharedPool(maxInflight int) int { return maxInflight - maxInflight/4 }

// shares counts the slots held per session; the zero value refuses nothing.
type shares struct {
	most int // of one session; 0: no shares
	pool int // of the shared agent's sessions together; 0: no pool
	// shared reports whether a session is the shared agent's (sharedAgents).
	shared func(session string) bool

	mu     sync.Mutex
	held   map[string]int // session → slots held
	pooled int            // slots held by sessions bound to no user
}

// newShares is the shares of a router with maxInflight slots: most per
// session (negative: none), and a pool with identities ids.
func newShares(maxInflight, most int, ids Identities) *shares {
	if most < 0 {
		return &shares{}
	}
	s := &shares{most: min(cmp.Or(most, DefaultSessionShare(maxInflight)), maxInflight), held: map[string]int{}}
	if ids != nil {
		s.pool = sharedPool(maxInflight)
		s.shared = func(session string) bool { return sharedAgents(ids, session) }
	}
	return s
}

// share is a slot counted against a session's share, given back once.
type share struct {
	session string
	counted bool // against the session's share
	pooled  bool // and against the shared agent's pool
}

// take counts one slot of session's; refused: why not, the busy text.
func (s *shares) take(session string) (sh share, refused string) {
	if s.most == 0 {
		return share{}, ""
	}
	pooled := s.shared != nil && s.shared(session)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[session] >= s.most {
		return share{}, fmt.Sprintf("this session holds its share of the router's slots (%d) and the router took nothing from this message; send it again after a short backoff", s.most)
	}
	if pooled && s.pooled >= s.pool {
		return share{}, fmt.Sprintf("the sessions bound to no user hold their share of the router's slots (%d) and the router took nothing from this message; send it again after a short backoff", s.pool)
	}
	s.held[session]++
	if pooled {
		s.pooled++
	}
	return share{session: session, counted: true, pooled: pooled}, ""
}

// give gives back the slot sh counted.
func (s *shares) give(sh share) {
	if !sh.counted {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.held[sh.session] - 1; n > 0 {
		s.held[sh.session] = n
	} else {
		delete(s.held, sh.session)
	}
	if sh.pooled {
		s.pooled--
	}
}

// sessionOf is the session token of a subject P.<verb>.<session>.
func sessionOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
