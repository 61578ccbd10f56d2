// Package groups owns tool groups (P_groups), session state (P_sessions),
// reset_tools and search_tools, and composes per request the view of the
// tools a session's model sees (docs/groups.md).
package groups

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/session"
	"github.com/toolbus/toolbus/store"
)

// Config configures a Store.
type Config struct {
	// Session configures the sessions (package session); its
	// ActiveByDefault is set here, to the groups defined active_by_default.
	Session session.Config
	// Search offers search_tools and makes basic a meta group (docs/protocol.md 4.2).
	Search bool
	// Pinned tools and groups are visible to every session (search.go).
	Pinned Pins
	// Quotas is the quota policy, read only to name unknown tools.
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

// Store owns one router's groups and sessions (definitions, session.Store and
// activation behind one handle) and composes views; concurrency-safe.
type Store struct {
	*definitions
	*session.Store
	*activation

	cfg    Config
	search searchCache // the tool search index (search.go)
}

// New returns a Store over the groups and sessions buckets; Start it.
func New(st *store.Store, cfg Config) *Store {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	defs := newDefinitions(st.Groups, cfg.Logger)
	defs.searchBasic = cfg.Search
	sess := session.NewStore(st.Sessions, sessionConfig(cfg, defs))
	return &Store{definitions: defs, Store: sess, activation: &activation{defs: defs, sessions: sess, pinned: cfg.Pinned.Groups}, cfg: cfg}
}

// sessionConfig is cfg's session part, with active_by_default groups.
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

// Start loads the group cache and feeds it until ctx ends or Stop. Sessions
// are not watched: there may be too many, and batches read them anyway.
func (s *Store) Start(ctx context.Context) (err error) {
	s.watch, err = store.WatchLoaded(ctx, s.kv, ">", s.applyGroup)
	return err
}

// Stop ends the watch, waiting for it until ctx ends; safe twice.
func (s *Store) Stop(ctx context.Context) error { return store.StopAll(ctx, s.watch) }

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
	// Every session's listing names every group with its description, and a
	// listing is one message: a group is bounded as a tool is.
	if b, err := json.Marshal(g); err != nil || len(b) > registry.MaxDefinition {
		return bus.Errorf(bus.CodeBadRequest, "group %s: the definition is %d bytes encoded, more than %d: every session may list it, and a listing is one message (docs/protocol.md 7.1)", g.Name, len(b), registry.MaxDefinition)
	}
	return nil
}

// Unknown lists, one actionable line each in a stable order, the
// configuration's names that match nothing now (docs/protocol.md 9): unknown
// pinned or quota tools, undefined pinned groups and tools' undefined groups.
func (s *Store) Unknown(reg *registry.Registry) []string {
	defined := func(g string) bool {
		_, ok := s.Group(g)
		return ok || g == bus.GroupBasic
	}
	registered := func(name string) bool { _, ok := reg.Lookup(name); return ok }
	var out []string
	for _, t := range s.cfg.Pinned.Tools {
		if !registered(t) {
			out = append(out, fmt.Sprintf("search.pinned.tools: %s is not a registered tool", t))
		}
	}
	for _, g := range s.cfg.Pinned.Groups {
		if !defined(g) {
			out = append(out, fmt.Sprintf("search.pinned.groups: %s is not a defined group", g))
		}
	}
	for _, r := range s.cfg.Quotas.Rules {
		for _, t := range r.Tools {
			if !registered(t) {
				out = append(out, fmt.Sprintf("quotas rule %s: %s is not a registered tool", r.Name, t))
			}
		}
	}
	seen := map[string]bool{}
	for _, t := range reg.Tools() {
		for _, g := range t.Def.Groups {
			if !defined(g) && !seen[g] {
				seen[g] = true
				out = append(out, fmt.Sprintf("group %s (of tool %s) is not defined: its tools are never visible", g, t.Def.Name))
			}
		}
	}
	return out
}
