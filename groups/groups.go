// Package groups owns tool groups and per-session state: group definitions
// in P_groups (served from a watch-fed cache), sessions in P_sessions
// (activated groups, permission context, todos, agent state; read from KV
// where it matters and kept in a bounded cache of recently used sessions),
// both updated only by compare-and-set; the built-in reset_tools; and the view of the tools a
// session's model sees, composed per request from the registry, the
// session's activation and the request-scoped tools, never by mutating
// the registry.
package groups

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/kvcache"
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
	// SessionCache bounds the sessions kept in memory (the least recently
	// used are dropped first); zero means DefaultSessionCache. The cache
	// saves decoding a session that has not changed since it was last
	// read: every read that must be current goes to KV (Refresh, Load).
	SessionCache int
	// Search offers the search_tools meta tool beside reset_tools
	// (docs/protocol.md 4.2); off, listings are as before.
	Search bool
	// Pinned tools and groups are visible to every session (search.go).
	Pinned Pins
	// Logger receives warnings about bad entries; nil discards.
	Logger *slog.Logger
}

// DefaultSessionCache is the default bound of the session cache.
const DefaultSessionCache = 10000

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

type group struct {
	def   bus.Group
	order int64 // when the group was first put (unix ns), stored with it
	rev   uint64
}

// Store is the cache and writer of groups and sessions. It is safe for
// concurrent use.
type Store struct {
	groupsKV   jetstream.KeyValue
	sessionsKV jetstream.KeyValue
	cfg        Config

	mu       sync.RWMutex
	groups   *kvcache.Map[*group]             // by name, with the tombstones of deleted groups
	ordered  []bus.Group                      // meta and external groups in registration order; rebuilt on change
	sessions *simplelru.LRU[string, *Session] // recently used sessions, guarded by mu

	watches []*store.Watch
	search  searchCache // the tool search index (search.go)
}

// New returns a Store over the store's groups and sessions buckets. Call
// Start before use.
func New(st *store.Store, cfg Config) *Store {
	if cfg.DefaultMode == "" {
		cfg.DefaultMode = "default"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IdleTTL <= 0 {
		cfg.IdleTTL = bus.DefaultSessionTTL
	}
	if cfg.SessionCache <= 0 {
		cfg.SessionCache = DefaultSessionCache
	}
	sessions, _ := simplelru.NewLRU[string, *Session](cfg.SessionCache, nil) // errors only for a size <= 0
	return &Store{groupsKV: st.Groups, sessionsKV: st.Sessions, cfg: cfg,
		groups: kvcache.New[*group](0), sessions: sessions}
}

// Start loads the group cache and keeps it fed until ctx ends or Stop.
// Sessions are not watched: a deployment may hold far more sessions than a
// router should keep in memory, and each batch reads its session from KV
// anyway (Refresh).
func (s *Store) Start(ctx context.Context) error {
	gw, err := store.WatchKV(ctx, s.groupsKV, ">", s.applyGroup)
	if err != nil {
		return err
	}
	s.watches = []*store.Watch{gw}
	for _, w := range s.watches {
		select {
		case <-w.Ready():
		case <-ctx.Done():
			s.Stop()
			return ctx.Err()
		}
	}
	return nil
}

// Stop ends the watches; safe to call twice.
func (s *Store) Stop() {
	for _, w := range s.watches {
		w.Stop()
	}
}

func (s *Store) applyGroup(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, err := s.groups.Apply(e, func(val []byte) (*group, bool, error) {
		var rec groupRecord
		if err := json.Unmarshal(val, &rec); err != nil {
			return nil, false, err
		}
		if err := CheckGroup(&rec.Group); err != nil {
			return nil, false, err
		}
		return newGroup(rec.Group, e.Revision(), rec.Registered), true, nil
	})
	if err != nil {
		s.cfg.Logger.Warn("groups: ignoring bad group entry", "group", e.Key())
	}
	if changed {
		s.reorder()
	}
}

// groupRecord is a P_groups value: the group's JSON with "registered", when
// it was first put (unix ns), so every router lists groups in one order.
type groupRecord struct {
	bus.Group
	Registered int64 `json:"registered"`
}

// newGroup is the cached form of g at revision rev, first put at order
// (unix ns; zero: before records carried it, the revision stands in).
func newGroup(g bus.Group, rev uint64, order int64) *group {
	if order == 0 {
		order = int64(rev)
	}
	return &group{def: g, order: order, rev: rev}
}

func (s *Store) putGroup(g bus.Group, rev uint64, order int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups.Put(g.Name, rev, newGroup(g, rev, order)) {
		s.reorder()
	}
}

func (s *Store) reorder() {
	gs := make([]*group, 0, s.groups.Len())
	for _, g := range s.groups.All() {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.def.Name, b.def.Name))
	})
	s.ordered = make([]bus.Group, len(gs))
	for i, g := range gs {
		s.ordered[i] = g.def
	}
}

// CheckGroup validates a group definition.
func CheckGroup(g *bus.Group) error {
	switch {
	case !bus.ValidName(g.Name):
		return bus.Errorf(bus.CodeBadRequest, "group name %q must match ^[A-Za-z0-9_-]{1,64}$", g.Name)
	case g.Name == bus.GroupBasic:
		return bus.Errorf(bus.CodeBadRequest, "group basic is built in and cannot be defined")
	case g.Scope != bus.ScopeMeta && g.Scope != bus.ScopeExternal:
		return bus.Errorf(bus.CodeBadRequest, "group %s: scope must be meta or external, got %q", g.Name, g.Scope)
	}
	return nil
}

// Put stores a group definition when it is new or changed.
func (s *Store) Put(ctx context.Context, g bus.Group) error {
	if g.Scope == "" {
		g.Scope = bus.ScopeMeta
	}
	if err := CheckGroup(&g); err != nil {
		return err
	}
	registered := time.Now().UnixNano()
	s.mu.RLock()
	cur, ok := s.groups.Get(g.Name)
	s.mu.RUnlock()
	if ok {
		if cur.def.Equal(g) {
			return nil
		}
		registered = cur.order // an update keeps the group's place
	}
	b, err := json.Marshal(groupRecord{Group: g, Registered: registered})
	if err != nil {
		return err
	}
	rev, err := s.groupsKV.Put(ctx, g.Name, b)
	if err != nil {
		return fmt.Errorf("groups: put %s: %w", g.Name, err)
	}
	s.putGroup(g, rev, registered)
	return nil
}

// Delete removes a group definition; sessions keep nothing of it that
// matters, since an undefined group is never active.
func (s *Store) Delete(ctx context.Context, name string) error {
	rev, err := store.Delete(ctx, s.groupsKV, name, store.Bounded)
	if err != nil {
		return fmt.Errorf("groups: delete %s: %w", name, err)
	}
	s.mu.Lock()
	if s.groups.Delete(name, max(rev, s.groups.Rev(name))) {
		s.reorder()
	}
	s.mu.Unlock()
	return nil
}

// Group returns the definition of a group.
func (s *Store) Group(name string) (bus.Group, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups.Get(name)
	if !ok {
		return bus.Group{}, false
	}
	return g.def, true
}

// Groups returns the defined groups (basic excluded) in registration order.
// The slice must not be modified.
func (s *Store) Groups() []bus.Group {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ordered
}

// Session returns the session's state as this router last read or wrote
// it; a session it has not seen (or no longer caches) starts from each
// group's active_by_default and the default mode. Reads that must see
// writes made through other routers use Refresh. The returned value must
// not be modified.
func (s *Store) Session(id string) *Session {
	s.mu.RLock() // Peek: Refresh, once per batch run, keeps the recency
	sess, ok := s.sessions.Peek(id)
	s.mu.RUnlock()
	if ok {
		return sess
	}
	return s.fresh()
}

func (s *Store) fresh() *Session {
	sess := &Session{Active: []string{}, Mode: s.cfg.DefaultMode,
		Rules: slices.Clone(s.cfg.DefaultRules), WorkDirs: slices.Clone(s.cfg.DefaultWorkDirs)}
	for _, g := range s.Groups() {
		if g.ActiveByDefault {
			sess.Active = append(sess.Active, g.Name)
		}
	}
	return sess
}

// Touch rewrites a stored session that is in use when half of its idle TTL
// has passed since its last write, so that the bucket's TTL only ever
// removes sessions nobody uses. It is cheap when nothing is due.
func (s *Store) Touch(ctx context.Context, id string) error {
	s.mu.Lock()
	sess, ok := s.sessions.Peek(id)
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
	entry, err := s.sessionsKV.Get(ctx, id)
	if store.IsNotFound(err) {
		return s.fresh(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("groups: read session %s: %w", id, err)
	}
	return decodeSession(entry)
}

func decodeSession(entry jetstream.KeyValueEntry) (*Session, error) {
	sess := new(Session)
	if err := json.Unmarshal(entry.Value(), sess); err != nil {
		return nil, fmt.Errorf("groups: session %s is corrupt: %w", entry.Key(), err)
	}
	sess.rev = entry.Revision()
	return sess, nil
}

// Refresh reads a session from KV, updates the cache with it, and returns
// it; on a KV error it falls back to the cache. Routers use it where a stale
// cache would give a wrong answer that a user sees: once per run of a batch,
// a listing, session.get.
func (s *Store) Refresh(ctx context.Context, id string) *Session {
	asked := time.Now()
	entry, err := s.sessionsKV.Get(ctx, id)
	var sess *Session
	switch {
	case store.IsNotFound(err):
		sess = s.fresh()
	case err != nil:
		return s.Session(id)
	default:
		s.mu.Lock()
		old, ok := s.sessions.Get(id)
		s.mu.Unlock()
		if ok && old.rev >= entry.Revision() { // the cache is current: nothing to decode
			return old
		}
		if sess, err = decodeSession(entry); err != nil {
			return s.Session(id)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.rev == 0 { // not stored (any more)
		// An entry cached before the read was deleted since; one cached
		// after it may be a write the read did not see yet.
		if old, ok := s.sessions.Peek(id); ok {
			if old.cached.After(asked) {
				return old
			}
			s.sessions.Remove(id)
		}
		return sess
	}
	if old, ok := s.sessions.Peek(id); ok && old.rev >= sess.rev {
		return old
	}
	sess.cached = time.Now()
	s.sessions.Add(id, sess)
	return sess
}

// Stored reports whether the session exists in KV as far as the cache
// knows (a session dropped from the cache counts as not stored).
func (s *Store) Stored(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions.Contains(id)
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
	rev, err := store.Update(ctx, s.sessionsKV, id, store.Bounded, func(entry jetstream.KeyValueEntry) ([]byte, error) {
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
			return nil, fmt.Errorf("groups: encode session %s: %w", id, err)
		}
		return b, nil
	})
	switch {
	case fnErr != nil:
		return nil, fnErr
	case err != nil:
		return nil, fmt.Errorf("groups: write session %s: %w", id, err)
	}
	next.rev = rev
	s.mu.Lock()
	if old, ok := s.sessions.Peek(id); !ok || old.rev < rev {
		next.cached = time.Now()
		s.sessions.Add(id, next)
	}
	s.mu.Unlock()
	return next, nil
}

// DeleteSession forgets a session.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if err := s.sessionsKV.Delete(ctx, id); err != nil && !store.IsNotFound(err) {
		return fmt.Errorf("groups: delete session %s: %w", id, err)
	}
	s.mu.Lock()
	s.sessions.Remove(id)
	s.mu.Unlock()
	return nil
}

// Sessions returns how many sessions the cache holds.
func (s *Store) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions.Len()
}
