// Package session holds the P_sessions record (docs/protocol.md 4.2, 8), its
// bounded cache and compare-and-set writes (Store), and the revision view
// deciding when a batch must read it again (Revisions).
package session

import (
	"cmp"
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
	// IdleTTL is the sessions bucket's TTL; a session in use is touched at
	// half of it, so only idle ones expire. Zero means bus.DefaultSessionTTL.
	IdleTTL time.Duration
	// CacheSize bounds the sessions kept (LRU); zero means DefaultCacheSize.
	CacheSize int
	// ActiveByDefault gives a never-written session's active groups; nil: none.
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
	// Cancelled are the built-in calls of the session's batches that a
	// cancel ended before they wrote it (Forestall, protocol 3.5, 1.32).
	Cancelled []Cancelled `json:"cancelled,omitempty"`

	rev    uint64
	cached time.Time // when this router's cache took it (local clock)
}

// Revision is the KV revision the session was read at; 0: not stored.
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
	c.Cancelled = slices.Clone(s.Cancelled)
	return &c
}

// Cancelled is a built-in call a cancel ended before it wrote the session:
// a re-sent copy of its batch must not write it either (Store.Forestall).
type Cancelled struct {
	Call string    `json:"call"` // <replyid>.<callid>
	At   time.Time `json:"at"`
}

// MaxCancelled bounds the calls a session keeps cancelled (the oldest go
// first); each is kept for the dedupe window, as long as a copy may come.
const MaxCancelled = 64

// ErrCancelled refuses a write of a built-in call that a cancel ended
// (Store.Forestall): the caller reports it interrupted.
var ErrCancelled = errors.New("session: the call was cancelled")

// callKey is the context key of the built-in call a write is made for (ForCall).
type callKey struct{}

// ForCall returns ctx for the writes of built-in call <replyID>.<callID>:
// Update refuses them ErrCancelled once a cancel ended the call.
func ForCall(ctx context.Context, replyID, callID string) context.Context {
	return context.WithValue(ctx, callKey{}, replyID+"."+callID)
}

// screen drops s's cancelled calls older than the dedupe window, and
// refuses a write for one of those left (ForCall).
func (s *Session) screen(ctx context.Context, now time.Time) error {
	if len(s.Cancelled) == 0 {
		return nil
	}
	s.Cancelled = slices.DeleteFunc(s.Cancelled, func(c Cancelled) bool { return now.Sub(c.At) > bus.DefaultDedupeWindow })
	call, _ := ctx.Value(callKey{}).(string)
	if call != "" && slices.ContainsFunc(s.Cancelled, func(c Cancelled) bool { return c.Call == call }) {
		return ErrCancelled
	}
	return nil
}

// Store is the per-session state of P_sessions: a bounded LRU, the reads
// that must be current (Refresh, Load) and the compare-and-set writes.
type Store struct {
	kv  jetstream.KeyValue
	cfg Config

	mu  sync.RWMutex
	lru *simplelru.LRU[string, *Session] // recently used sessions, guarded by mu
}

// NewStore returns the sessions of bucket kv (P_sessions).
func NewStore(kv jetstream.KeyValue, cfg Config) *Store {
	cfg.DefaultMode = cmp.Or(cfg.DefaultMode, "default")
	cfg.IdleTTL = cmp.Or(max(cfg.IdleTTL, 0), bus.DefaultSessionTTL)
	cfg.CacheSize = cmp.Or(max(cfg.CacheSize, 0), DefaultCacheSize)
	lru, _ := simplelru.NewLRU[string, *Session](cfg.CacheSize, nil) // errors only for a size <= 0
	return &Store{kv: kv, cfg: cfg, lru: lru}
}

// Session returns the cached or a fresh session; not to be modified.
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

// Touch rewrites a session in use past half its idle TTL, so only idle ones expire.
func (s *Store) Touch(ctx context.Context, id string) error {
	s.mu.RLock() // Peek, as Session: the recency is not changed
	sess, ok := s.lru.Peek(id)
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	return s.TouchRead(ctx, id, sess, time.Now())
}

// TouchRead is Touch at now for sess, session id as the caller read it (a
// batch's snapshot, Revisions.Snapshot): a session not stored is left alone.
func (s *Store) TouchRead(ctx context.Context, id string, sess *Session, now time.Time) error {
	if sess.rev == 0 || now.Sub(sess.Updated) < s.cfg.IdleTTL/2 {
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

// Refresh reads a session from KV into the cache (on error: the cache).
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

// Stored reports whether the session exists in KV as far as the cache knows.
func (s *Store) Stored(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Contains(id)
}

// ErrNoRoom refuses a session's first write past P_sessions' soft bound
// (store.Bound; docs/protocol.md 4.2, 1.24).
var ErrNoRoom = bus.Errorf(bus.CodeLimitExceeded, "LimitExceededError: No new session can be stored now: the store of sessions %v. Go on in a session that exists, or try again later.", store.ErrNoRoom)

// ErrAbort may be returned by an Update function to leave the session as it is.
var ErrAbort = errors.New("groups: update aborted")

// Update changes a session by compare-and-set; fn edits a copy of the latest
// (maybe more than once) and its error writes nothing. A session not stored
// yet is refused ErrNoRoom past P_sessions' soft bound.
func (s *Store) Update(ctx context.Context, id string, fn func(*Session) error) (*Session, error) {
	var next *Session
	var fnErr error
	rev, err := store.Update(ctx, s.kv, id, store.Bounded, func(entry jetstream.KeyValueEntry) ([]byte, error) {
		cur := s.fresh() // also for a corrupt record: it is replaced, not propagated
		if entry != nil {
			if c, err := decodeSession(entry); err == nil {
				cur = c
			}
		}
		next = cur.clone()
		now := time.Now().UTC()
		if fnErr = next.screen(ctx, now); fnErr == nil {
			fnErr = fn(next)
		}
		if fnErr != nil {
			return nil, fnErr
		}
		next.Updated = now
		b, err := json.Marshal(next)
		if err != nil {
			return nil, fmt.Errorf("session: encode session %s: %w", id, err)
		}
		if entry == nil && !store.BoundOf(s.kv).Room(ctx, len(b)+len(id)) {
			return nil, ErrNoRoom // a stored session's writes go on (1.24)
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

// Forestall records that a cancel ended built-in calls of batch replyID
// (call ids) before they wrote session id: a write of theirs under ForCall,
// a re-sent copy's or a running one's, is refused ErrCancelled from then on,
// for the dedupe window (protocol 3.5, 1.32). One compare-and-set for all.
func (s *Store) Forestall(ctx context.Context, id, replyID string, calls []string) error {
	_, err := s.Update(ctx, id, func(sess *Session) error {
		for _, c := range calls {
			sess.Cancelled = append(sess.Cancelled, Cancelled{Call: replyID + "." + c, At: time.Now().UTC()})
		}
		sess.Cancelled = sess.Cancelled[max(len(sess.Cancelled)-MaxCancelled, 0):]
		return nil
	})
	return err
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

// Revisions decides per batch run whether the session is read from KV
// (docs/protocol.md 4.2): only a sessionrev the cache and watch cover skips it.
type Revisions struct {
	groups *Store
	kv     jetstream.KeyValue // P_sessions; nil: no watch, every batch is read

	mu     sync.Mutex
	newer  map[string]uint64 // the latest revision the watch delivered per session
	floor  uint64            // a cached session older than this may be stale (newer overflowed)
	last   uint64            // the newest revision the watch delivered, of any session
	missed map[string]uint64 // sessions read absent, with last as it was before the read
	limit  int
	ready  bool         // the watch started: current while it runs
	watch  *store.Watch // nil: no watch
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
	// Every write before the watch is one a later read sees: the bucket's
	// last revision now counts as delivered (missCurrent).
	if st, err := s.kv.Status(ctx); err == nil {
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			s.last = bs.StreamInfo().State.LastSeq
		}
	}
	// Deletes and purges come as entries too, at their own revision: the
	// cached session is then stale, and the next batch reads it gone.
	w, err := store.WatchKV(ctx, s.kv, ">", func(e jetstream.KeyValueEntry) { s.seen(e.Key(), e.Revision()) },
		jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ready, s.watch = true, w
	s.mu.Unlock()
	return nil
}

// Stop ends the watch and waits for it until ctx ends; safe twice.
func (s *Revisions) Stop(ctx context.Context) error { return store.StopAll(ctx, s.watch) }

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

// current reports whether a session cached at have holds every write seen.
func (s *Revisions) current(id string, have uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running() && have >= s.floor && have >= s.newer[id]
}

// running reports whether the watch runs. s.mu is held.
func (s *Revisions) running() bool { return s.ready && (s.watch == nil || !s.watch.Ended()) }

// Snapshot makes session id current for a batch run: a KV read, unless rev
// (sessionrev) allows the cache (canSkip, missCurrent).
func (s *Revisions) Snapshot(ctx context.Context, id string, rev uint64) *Session {
	cur := s.groups.Session(id)
	if canSkip(rev, cur.Revision(), s.current(id, cur.Revision())) || cur.Revision() == 0 && s.missCurrent(id, rev) {
		return cur
	}
	ctx, cancel := context.WithTimeout(ctx, sessionReadTimeout)
	defer cancel()
	s.mu.Lock()
	before, ready := s.last, s.running()
	s.mu.Unlock()
	sess, absent := s.groups.Read(ctx, id)
	if absent && ready {
		s.miss(id, before)
	}
	return sess
}

// miss records session id read absent with the watch at revision at.
func (s *Revisions) miss(id string, at uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.missed) >= s.limit {
		clear(s.missed) // forgotten misses are read again
	}
	s.missed[id] = at
}

// missCurrent reports whether a batch at revision asked may get the defaults
// of never-written id: read absent, the watch past asked, no write since.
func (s *Revisions) missCurrent(id string, asked uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.missed[id]
	return ok && s.running() && asked > 0 && asked <= s.last && s.floor <= at && s.newer[id] <= at
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

// Revision is the session's known KV revision; for a standing miss, the
// watch's newest (docs/protocol.md 4.2); 0 when none is known.
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
