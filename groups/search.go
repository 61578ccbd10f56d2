package groups

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/search"
)

// SearchTools is the name of the built-in tool search (docs/protocol.md 4.2).
const SearchTools = "search_tools"

// Search input bounds.
const (
	DefaultSearchLimit = 10
	MaxSearchLimit     = 50
	MaxSearchQuery     = 1000 // bytes
)

// Pins are tools and groups every session sees whatever its activation:
// a pinned group counts as active, a pinned tool as visible (it still needs
// a live worker). Without search a model is shown all it may call; with
// it, the pinned few plus what it finds.
type Pins struct {
	Tools  []string `json:"tools,omitempty"`
	Groups []string `json:"groups,omitempty"`
}

const searchDescription = "Search every tool you could use, including those in inactive tool groups, by words " +
	"(what you want to do, names, parameters). Returns the best matches with their groups. " +
	"Set activate to true to activate the groups of the matches at once; other active groups stay active."

var searchSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"query":{"type":"string","description":"Words that describe the tool you need."},` +
	`"limit":{"type":"integer","minimum":1,"maximum":50,"default":10,"description":"How many matches to return."},` +
	`"activate":{"type":"boolean","default":false,"description":"Activate the groups of the matches."}},` +
	`"required":["query"],"additionalProperties":false}`)

// searchDef is the definition of search_tools, offered when Config.Search
// is set and a meta group exists (there is nothing to find otherwise).
func (s *Store) searchDef() (bus.ToolDef, bool) {
	if !s.cfg.Search || !s.hasMeta() {
		return bus.ToolDef{}, false
	}
	d := bus.ToolDef{Name: SearchTools, Description: searchDescription, InputSchema: searchSchema, ConcurrencySafe: false}
	d.Defaults()
	return d, true
}

// pinnedTool and pinnedGroup report the configured pins.
func (s *Store) pinnedTool(name string) bool  { return slices.Contains(s.cfg.Pinned.Tools, name) }
func (s *Store) pinnedGroup(name string) bool { return slices.Contains(s.cfg.Pinned.Groups, name) }

// SkillDoc is a skill the session's user could load, as the router's
// catalogue knows it: skills are searched beside tools.
type SkillDoc struct {
	Name, Description string
	Groups            []string // the groups the skill belongs to; none: always visible
}

// SearchInput is search_tools' input, decoded strictly.
type SearchInput struct {
	Query    string `json:"query"`
	Limit    int    `json:"limit,omitempty"`
	Activate bool   `json:"activate,omitempty"`
}

// ParseSearch decodes and checks search_tools' input: an object with a
// non-empty query, an optional limit in [1, 50] and an optional boolean
// activate, nothing else. Errors are invalid_input with a text the model
// can act on.
func ParseSearch(input json.RawMessage) (SearchInput, error) {
	var in SearchInput
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || dec.More() {
		if err == nil {
			err = fmt.Errorf("trailing data after the object")
		}
		return in, bus.Errorf(bus.CodeInvalidInput, "Invalid arguments for search_tools: %v. Pass {\"query\": \"words\", \"limit\": 10, \"activate\": false}.", err)
	}
	switch q := strings.TrimSpace(in.Query); {
	case q == "":
		return in, bus.Errorf(bus.CodeInvalidInput, "Invalid arguments for search_tools: query must be a non-empty string of words.")
	case len(in.Query) > MaxSearchQuery:
		return in, bus.Errorf(bus.CodeInvalidInput, "Invalid arguments for search_tools: query is longer than %d bytes; use a few words.", MaxSearchQuery)
	}
	if in.Limit == 0 {
		in.Limit = DefaultSearchLimit
	}
	if in.Limit < 1 || in.Limit > MaxSearchLimit {
		return in, bus.Errorf(bus.CodeInvalidInput, "Invalid arguments for search_tools: limit must be between 1 and %d.", MaxSearchLimit)
	}
	return in, nil
}

// toolIndex is the search index over the registry's tools, rebuilt when a
// definition or a group changes (not on worker beats).
type toolIndex struct {
	regVersion uint64 // the registry's version the tools were read at
	tools      []*registry.Tool
	groups     []bus.Group
	ix         *search.Index
}

type searchCache struct {
	mu  sync.Mutex
	cur *toolIndex
}

// index returns the index over the registry's tools, building it when
// the tools or groups differ from the last one's. Listing the registry
// (a sort) is skipped while its version is unchanged; a change that is
// not a definition (a worker's beat) keeps the index.
func (s *Store) index(reg *registry.Registry) *toolIndex {
	gs := s.Groups()
	ver := reg.Version()
	s.search.mu.Lock()
	defer s.search.mu.Unlock()
	c := s.search.cur
	if c != nil && c.regVersion == ver && slices.EqualFunc(c.groups, gs, bus.Group.Equal) {
		return c
	}
	tools := reg.Tools()
	if c != nil && slices.Equal(c.tools, tools) && slices.EqualFunc(c.groups, gs, bus.Group.Equal) {
		c.regVersion = ver
		return c
	}
	docs := make([]search.Doc, len(tools))
	for i, t := range tools {
		docs[i] = toolDoc(&t.Def, gs)
	}
	s.search.cur = &toolIndex{regVersion: ver, tools: tools, groups: gs, ix: search.New(docs)}
	return s.search.cur
}

// toolDoc is what a tool is searched by: its name (counted thrice), title
// and schema property names (twice), description and its groups' names and
// descriptions (once).
func toolDoc(d *bus.ToolDef, gs []bus.Group) search.Doc {
	fs := []search.Field{{Text: d.Name, Weight: 3}, {Text: d.Title, Weight: 2}, {Text: d.Description}}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(d.InputSchema, &schema) == nil {
		for p := range schema.Properties {
			fs = append(fs, search.Field{Text: p, Weight: 2})
		}
	}
	for _, g := range gs {
		if slices.Contains(d.Groups, g.Name) {
			fs = append(fs, search.Field{Text: g.Name + " " + g.Description})
		}
	}
	return search.Doc{Fields: fs}
}

// match is one search result.
type match struct {
	name, kind, desc string
	groups           []string
	visible          bool   // callable now
	activate         string // the meta group that makes it visible; "" when visible or none can
}

// reach says whether a tool can be found by this view's session, and how:
// visible now, or through a meta group the model may activate. Tools of
// external-scope groups that are inactive, of undefined groups, without a
// live worker, or hidden by the request, are never found.
func (v *View) reach(t *registry.Tool) (visible bool, via string, ok bool) {
	if v.req.Mode == bus.MergeExternalOnly || v.req.external(t.Def.Name) != nil || !v.reg.Live(t) {
		return false, "", false
	}
	if _, vis := v.inactiveGroup(t); vis {
		return true, "", true
	}
	for _, g := range v.store.Groups() {
		if g.Scope == bus.ScopeMeta && slices.Contains(t.Def.Groups, g.Name) {
			return false, g.Name, true
		}
	}
	return false, "", false
}

// skillReach is reach for a skill: one without groups is always loadable;
// else through an active group, or a meta group the model may activate.
func (v *View) skillReach(sk SkillDoc) (visible bool, via string, ok bool) {
	if len(sk.Groups) == 0 {
		return true, "", true
	}
	for _, g := range sk.Groups {
		if v.sess.IsActive(g) || v.store.pinnedGroup(g) {
			return true, "", true
		}
	}
	for _, g := range v.store.Groups() {
		if g.Scope == bus.ScopeMeta && slices.Contains(sk.Groups, g.Name) {
			return false, g.Name, true
		}
	}
	return false, "", false
}

// Search runs search_tools for the view's session (id session): it ranks
// every tool and skill the session could reach, and with activate switches
// on the groups of the matches through the same path as reset_tools, the
// other active groups staying active. It returns the text the model reads,
// or an invalid_input *bus.Error; nothing changes on an error.
func (v *View) Search(ctx context.Context, session string, input json.RawMessage, skills []SkillDoc) (string, error) {
	in, err := ParseSearch(input)
	if err != nil {
		return "", err
	}
	ms := v.find(in.Query, in.Limit, skills)
	var b strings.Builder
	if len(ms) == 0 {
		fmt.Fprintf(&b, "No tool matches %q. Try other words.", in.Query)
		return b.String(), nil
	}
	fmt.Fprintf(&b, "Found %d match(es) for %q:\n", len(ms), in.Query)
	var add []string
	for i, m := range ms {
		state := "active"
		if !m.visible {
			state = "inactive"
			if m.activate != "" && !slices.Contains(add, m.activate) {
				add = append(add, m.activate)
			}
		}
		groups := "basic"
		if len(m.groups) > 0 {
			groups = strings.Join(m.groups, ", ")
		}
		fmt.Fprintf(&b, "%d. %s %s (group: %s; %s): %s\n", i+1, m.kind, m.name, groups, state, firstLine(m.desc))
	}
	if !in.Activate {
		if len(add) > 0 {
			b.WriteString("Call search_tools again with \"activate\": true, or reset_tools, to activate the groups of inactive matches.")
		}
		return strings.TrimRight(b.String(), "\n"), nil
	}
	text, err := v.store.activate(ctx, session, func(cur []string) []string {
		out := slices.Clone(cur)
		for _, g := range add {
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
		return out
	})
	if err != nil {
		return "", err
	}
	return b.String() + text, nil
}

// find ranks tools and skills for query, best first, at most limit, among
// what the session could reach.
func (v *View) find(query string, limit int, skills []SkillDoc) []match {
	ti := v.store.index(v.reg)
	type scored struct {
		m     match
		score float64
	}
	var all []scored
	for _, h := range ti.ix.Search(query, limit, func(d int) bool { _, _, ok := v.reach(ti.tools[d]); return ok }) {
		t := ti.tools[h.Doc]
		vis, via, _ := v.reach(t)
		all = append(all, scored{match{name: t.Def.Name, kind: "tool", desc: t.Def.Description, groups: t.Def.Groups, visible: vis, activate: via}, h.Score})
	}
	if len(skills) > 0 {
		docs := make([]search.Doc, len(skills))
		for i, sk := range skills {
			docs[i] = search.Doc{Fields: []search.Field{{Text: sk.Name, Weight: 3}, {Text: sk.Description}}}
		}
		for _, h := range search.New(docs).Search(query, limit, func(d int) bool { _, _, ok := v.skillReach(skills[d]); return ok }) {
			sk := skills[h.Doc]
			vis, via, _ := v.skillReach(sk)
			all = append(all, scored{match{name: sk.Name, kind: "skill", desc: sk.Description, groups: sk.Groups, visible: vis, activate: via}, h.Score})
		}
	}
	slices.SortStableFunc(all, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	out := make([]match, 0, min(limit, len(all)))
	for _, s := range all[:min(limit, len(all))] {
		out = append(out, s.m)
	}
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
