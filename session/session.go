// Package session holds the session record of P_sessions (docs/protocol.md
// 4.2, 8), the bounded cache of recently used sessions with its
// compare-and-set writes (Store), and the router's revision view over the
// bucket's watch (Revisions): when a batch's session must be read again,
// and which revision a reply echoes.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Config configures a Store.
type Config struct {
	// DefaultMode is the permission mode of a new session; "" means "default".
	DefaultMode string
	// DefaultRules and DefaultWorkDirs seed a new session's permission context.
	DefaultRules    []bus.Rule
	DefaultWorkDirs []string
	// IdleTTL is the sessions bucket's TTL; a session in use is rewritten
	// (touched) once half of it has passed, so only idle sessions expire.
	// Zero means bus.DefaultSessionTTL.
	IdleTTL time.Duration
	// CacheSize bounds the sessions kept in memory (the least recently
	// used are dropped first); zero means DefaultCacheSize.
	CacheSize int
	// ActiveByDefault returns the groups a session never written starts
	// with active; nil means none.
	ActiveByDefault func() []string
}

// DefaultCacheSize is Config.CacheSize's default.
const DefaultCacheSize = 10000

// Session is the state of one agent session, as stored in P_sessions.
type Session struct {
	// Active lists the activated groups other than basic.
	Active []string `json:"active"`
	// Mode is the permission mode.
	Mode string `json:"mode,omitempty"`
	// Rules are the session's permission rules.
	Rules []bus.Rule `json:"rules,omitempty"`
	// WorkDirs are the working directories path rules are relative to.
	WorkDirs []string `json:"work_dirs,omitempty"`
	// Todos is the todo list of todo_write.
	Todos json.RawMessage `json:"todos,omitempty"`
	// State is the agent state given to state_injected tools.
	State json.RawMessage `json:"state,omitempty"`
	// Updated is when the session was last written.
	Updated time.Time `json:"updated"`

	rev    uint64
	cached time.Time // when this router's cache took it (local clock)
}

// Revision is the KV revision the session was read at; 0 for a session that
// is not stored yet.
func (s *Session) Revision() uint64 { return s.rev }

// IsActive reports whether group g is active in the session (basic always is).
func (s *Session) IsActive(g string) bool {
	return g == bus.GroupBasic || slices.Contains(s.Active, g)
}

func (s *Session) clone() *Session {
	c := *s
	c.Active = slices.Clone(s.Active)
	c.Rules = slices.Clone(s.Rules)
	c.WorkDirs = slices.Clone(s.WorkDirs)
	return &c
}

// Store is the per-session state of P_sessions: a bounded cache of the
// recently used sessions (least recently used dropped first), the reads
// that must be current (Refresh, Load) and the compare-and-set writes
// (Update, Touch, DeleteSession). A session it has not seen starts from
// the defaults and each defined group's active_by_default (Config.ActiveByDefault). Safe for
// concurrent use.
type Store struct {
	kv  jetstream.KeyValue
	cfg Config

	mu  sync.RWMutex
	lru *simplelru.LRU[string, *Session] // recently used sessions, guarded by mu
}

// NewStore returns the sessions of bucket kv (P_sessions).
func NewStore(kv jetstream.KeyValue, cfg Config) *Store {
	if cfg.DefaultMode == "" {
		cfg.DefaultMode = "default"
	}
	if cfg.IdleTTL <= 0 {
		cfg.IdleTTL = bus.DefaultSessionTTL
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	lru, _ := simplelru.NewLRU[string, *Session](cfg.CacheSize, nil) // errors only for a size <= 0
	return &Store{kv: kv, cfg: cfg, lru: lru}
}

// Session returns the session's state as this router last read or wrote
// it; a session it has not seen (or no longer caches) starts from each
// group's active_by_default and the default mode. Reads that must see
// writes made through other routers use Refresh. The returned value must
// not be modified.
func (s *Store) Session(id string) *Session {
	s.mu.RLock() // Peek: Refresh, once per batch run, keeps the recency
	sess, ok := s.lru.Peek(id)
	s.mu.RUnlock()
	if ok {
		return sess
	}
	return s.fresh()
}

func (s *Store) fresh() *Session {
	sess := &Session{Active: []string{}, Mode: s.cfg.DefaultMode,
		Rules: slices.Clone(s.cfg.DefaultRules), WorkDirs: slices.Clone(s.cfg.DefaultWorkDirs)}
	if s.cfg.ActiveByDefault != nil {
		sess.Active = append(sess.Active, s.cfg.ActiveByDefault()...)
	}
	return sess
}

// Touch rewrites a stored session that is in use when half of its idle TTL
// has passed since its last write, so that the bucket's TTL only ever
// removes sessions nobody uses. It is cheap when nothing is due.
func (s *Store) Touch(ctx context.Context, id string) error {
	s.mu.Lock()
	sess, ok := s.lru.Peek(id)
	s.mu.Unlock()
	if !ok || time.Since(sess.Updated) < s.cfg.IdleTTL/2 {
		return nil
	}
	_, err := s.Update(ctx, id, func(*Session) error { return nil })
	return err
}

// Load reads a session from KV rather than the cache: for the rare reads
// that must see every write already acknowledged (agent state).
func (s *Store) Load(ctx context.Context, id string) (*Session, error) {
	entry, err := s.kv.Get(ctx, id)
	if store.IsNotFound(err) {
		return s.fresh(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("session: read session %s: %w", id, err)
	}
	return decodeSession(entry)
}

func decodeSession(entry jetstream.KeyValueEntry) (*Session, error) {
	sess := new(Session)
	if err := json.Unmarshal(entry.Value(), sess); err != nil {
		return nil, fmt.Errorf("session: session %s is corrupt: %w", entry.Key(), err)
	}
	sess.rev = entry.Revision()
	return sess, nil
}

// Refresh reads a session from KV, updates the cache with it, and returns
// it; on a KV error it falls back to the cache. Routers use it where a stale
// cache would give a wrong answer that a user sees: once per run of a batch,
// a listing, session.get.
func (s *Store) Refresh(ctx context.Context, id string) *Session {
	sess, _ := s.Read(ctx, id)
	return sess
}

// Read is Refresh that also reports whether KV answered that the session
// is not stored (absent), which a fallback to the cache never does.
func (s *Store) Read(ctx context.Context, id string) (sess *Session, absent bool) {
	asked := time.Now()
	entry, err := s.kv.Get(ctx, id)
	switch {
	case store.IsNotFound(err):
		sess = s.fresh()
	case err != nil:
		return s.Session(id), false
	default:
		s.mu.Lock()
		old, ok := s.lru.Get(id)
		s.mu.Unlock()
		if ok && old.rev >= entry.Revision() { // the cache is current: nothing to decode
			return old, false
		}
		if sess, err = decodeSession(entry); err != nil {
			return s.Session(id), false
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.rev == 0 { // not stored (any more)
		// An entry cached before the read was deleted since; one cached
		// after it may be a write the read did not see yet.
		if old, ok := s.lru.Peek(id); ok {
			if old.cached.After(asked) {
				return old, false
			}
			s.lru.Remove(id)
		}
		return sess, true
	}
	if old, ok := s.lru.Peek(id); ok && old.rev >= sess.rev {
		return old, false
	}
	sess.cached = time.Now()
	s.lru.Add(id, sess)
	return sess, false
}

// Stored reports whether the session exists in KV as far as the cache
// knows (a session dropped from the cache counts as not stored).
func (s *Store) Stored(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Contains(id)
}

// ErrAbort may be returned by an Update function to leave the session as it is.
var ErrAbort = errors.New("groups: update aborted")

// Update changes a session with compare-and-set: fn gets a private copy of
// the latest stored state (or a fresh session) and edits it; the write is
// retried with fresh state when another router wrote in between, so no
// update is ever lost. fn may run more than once. When fn returns an error
// nothing is written and the error is returned.
func (s *Store) Update(ctx context.Context, id string, fn func(*Session) error) (*Session, error) {
	var next *Session
	var fnErr error
	rev, err := store.Update(ctx, s.kv, id, store.Bounded, func(entry jetstream.KeyValueEntry) ([]byte, error) {
		cur := s.fresh()
		if entry != nil {
			cur = new(Session)
			if err := json.Unmarshal(entry.Value(), cur); err != nil {
				cur = s.fresh() // a corrupt record is replaced, not propagated
			}
			cur.rev = entry.Revision()
		}
		next = cur.clone()
		if fnErr = fn(next); fnErr != nil {
			return nil, fnErr
		}
		next.Updated = time.Now().UTC()
		b, err := json.Marshal(next)
		if err != nil {
			return nil, fmt.Errorf("session: encode session %s: %w", id, err)
		}
		return b, nil
	})
	switch {
	case fnErr != nil:
		return nil, fnErr
	case err != nil:
		return nil, fmt.Errorf("session: write session %s: %w", id, err)
	}
	next.rev = rev
	s.mu.Lock()
	if old, ok := s.lru.Peek(id); !ok || old.rev < rev {
		next.cached = time.Now()
		s.lru.Add(id, next)
	}
	s.mu.Unlock()
	return next, nil
}

// DeleteSession forgets a session.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if err := s.kv.Delete(ctx, id); err != nil && !store.IsNotFound(err) {
		return fmt.Errorf("session: delete session %s: %w", id, err)
	}
	s.mu.Lock()
	s.lru.Remove(id)
	s.mu.Unlock()
	return nil
}

// Sessions returns how many sessions the cache holds.
func (s *Store) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}
