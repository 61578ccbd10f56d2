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
	"context"
	"log/slog"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/session"
	"github.com/toolbus/toolbus/store"
)

// Config configures a Store.
type Config struct {
	// Session configures the sessions (package session); its
	// ActiveByDefault is set here, to the groups defined active_by_default.
	Session session.Config
	// Search offers the search_tools meta tool beside reset_tools
	// (docs/protocol.md 4.2) and makes basic (the tools without a group) a
	// meta group, off in a new session unless pinned; off, listings are as
	// before.
	Search bool
	// Pinned tools and groups are visible to every session (search.go).
	Pinned Pins
	// Quotas is the router's quota policy, read only to name its unknown
	// tools (Unknown).
	Quotas limits.Policy
	// Logger receives warnings about bad entries; nil discards.
	Logger *slog.Logger
}

// DefaultSessionCache is the default bound of the session cache.
const DefaultSessionCache = session.DefaultCacheSize

// Session is the state of one agent session (package session).
type Session = session.Session

// ErrAbort may be returned by an Update function to leave the session as it is.
var ErrAbort = session.ErrAbort

// Store is the owner of the groups and sessions of one router: it holds
// the parts below, each with one responsibility, and embeds them so that
// its callers keep one handle (and their call sites):
//
//   - definitions: the watch-fed cache of P_groups and its writes (defs.go);
//   - session.Store: the bounded cache of P_sessions and its
//     compare-and-set writes (package session);
//   - activation: reset_tools and the one path that switches a session's
//     meta groups (reset.go).
//
// The Store itself starts and stops them and composes views (view.go) and
// the tool search (search.go). It is safe for concurrent use.
type Store struct {
	*definitions
	*session.Store
	*activation

	cfg    Config
	search searchCache // the tool search index (search.go)
}

// New returns a Store over the store's groups and sessions buckets. Call
// Start before use.
func New(st *store.Store, cfg Config) *Store {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	defs := newDefinitions(st.Groups, cfg.Logger)
	defs.searchBasic = cfg.Search
	sess := session.NewStore(st.Sessions, sessionConfig(cfg, defs))
	return &Store{definitions: defs, Store: sess, activation: &activation{defs: defs, sessions: sess, pinned: cfg.Pinned.Groups}, cfg: cfg}
}

// sessionConfig is the session store's part of cfg; a fresh session starts
// with the groups defined active_by_default.
func sessionConfig(cfg Config, defs *definitions) session.Config {
	sc := cfg.Session
	sc.ActiveByDefault = func() (names []string) {
		for _, g := range defs.Groups() {
			if g.ActiveByDefault {
				names = append(names, g.Name)
			}
		}
		return names
	}
	return sc
}

// Start loads the group cache and keeps it fed until ctx ends or Stop.
// Sessions are not watched: a deployment may hold far more sessions than a
// router should keep in memory, and each batch reads its session from KV
// anyway (Refresh).
func (s *Store) Start(ctx context.Context) error { return s.definitions.start(ctx) }

// Stop ends the watches, waiting for them until ctx ends; safe to call
// twice.
func (s *Store) Stop(ctx context.Context) error { return s.definitions.stop(ctx) }

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
