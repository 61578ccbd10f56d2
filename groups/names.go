package groups

import (
	"fmt"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
)

// Unknown names the configuration's references that match nothing now
// (docs/protocol.md 9, status): pinned tools and quota rules' tools that
// no worker registered, pinned groups that are not defined (basic always
// is), and groups named by registered tools that are not defined (such a
// tool is never visible, 4.2). Each entry is one line an operator can act
// on, in a stable order; nil when every name is known. A tool may be
// registered later: the router's start-up warning says so, and status
// shows the names as they are at the time asked.
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
