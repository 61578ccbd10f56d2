package groups

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/search"
	"github.com/toolbus/toolbus/session"
)

// SearchTools is the name of the built-in tool search (docs/protocol.md 4.2).
const SearchTools = "search_tools"

// Search input bounds.
const (
	DefaultSearchLimit = 10
	MaxSearchLimit     = 50
	MaxSearchQuery     = 1000 // bytes
)

// Pins are tools and groups every session sees (a tool needs a live worker).
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

// SkillDoc is a skill the session's user could load, searched beside tools.
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

// ParseSearch checks search_tools' input; errors are invalid_input.
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
	in.Limit = cmp.Or(in.Limit, DefaultSearchLimit)
	if in.Limit < 1 || in.Limit > MaxSearchLimit {
		return in, bus.Errorf(bus.CodeInvalidInput, "Invalid arguments for search_tools: limit must be between 1 and %d.", MaxSearchLimit)
	}
	return in, nil
}

// toolIndex is the search index over the registry's tools, changed a tool at a
// time when a definition or group changes; a tool keeps its document id.
type toolIndex struct {
	regVersion uint64 // the registry's version the tools were read at
	groups     []bus.Group
	ix         *search.Index
	ids        map[string]int   // tool name → its document
	tools      []*registry.Tool // by document id; nil for a free one
	seen       []uint64         // by document id: the last sync that saw it
	syncs      uint64
	// list and listIDs are the last listing synced and its tools' document
	// ids by position: registration order finds most without a map lookup.
	list    []*registry.Tool
	listIDs []int
}

// searchCache holds the index; mu guards it (sync writes, searches read).
type searchCache struct {
	mu  sync.RWMutex
	cur *toolIndex
}

// index returns the index over the registry's tools, read-locked (call done
// after searching), synced first when the registry or groups changed.
func (s *Store) index(reg *registry.Registry) (ti *toolIndex, done func()) {
	gs := s.Groups()
	ver := reg.Version()
	s.search.mu.RLock()
	if c := s.search.cur; c != nil && c.regVersion == ver && slices.EqualFunc(c.groups, gs, bus.Group.Equal) {
		return c, s.search.mu.RUnlock
	}
	s.search.mu.RUnlock()
	tools := reg.Tools() // outside the lock: searches hold it while they ask the registry
	s.search.mu.Lock()
	if s.search.cur == nil {
		s.search.cur = newToolIndex()
	}
	s.search.cur.sync(tools, ver, gs)
	s.search.mu.Unlock()
	s.search.mu.RLock()
	return s.search.cur, s.search.mu.RUnlock
}

func newToolIndex() *toolIndex {
	return &toolIndex{ix: search.New(nil), ids: map[string]int{}}
}

// sync brings the index to tools and gs, re-indexing what changed (keeps tools).
func (ti *toolIndex) sync(tools []*registry.Tool, ver uint64, gs []bus.Group) {
	changed := changedGroups(ti.groups, gs)
	ti.syncs++
	ids := make([]int, len(tools))
	for i, t := range tools {
		if i < len(ti.list) && ti.list[i] == t {
			id := ti.listIDs[i] // the same tool at the same place: unchanged
			if inGroups(&t.Def, changed) {
				ti.ix.Replace(id, toolDoc(&t.Def, gs))
			}
			ids[i], ti.seen[id] = id, ti.syncs
			continue
		}
		id, ok := ti.ids[t.Def.Name]
		switch {
		case !ok:
			id = ti.ix.Add(toolDoc(&t.Def, gs))
			ti.ids[t.Def.Name] = id
			if id == len(ti.tools) {
				ti.tools, ti.seen = append(ti.tools, nil), append(ti.seen, 0)
			}
		case ti.tools[id] != t || inGroups(&t.Def, changed):
			ti.ix.Replace(id, toolDoc(&t.Def, gs))
		}
		ti.tools[id], ti.seen[id], ids[i] = t, ti.syncs, id
	}
	if len(ti.ids) > len(tools) {
		for name, id := range ti.ids {
			if ti.seen[id] != ti.syncs {
				ti.ix.Remove(id)
				delete(ti.ids, name)
				ti.tools[id] = nil
			}
		}
	}
	ti.regVersion, ti.groups, ti.list, ti.listIDs = ver, gs, tools, ids
}

// changedGroups names the groups added, removed or changed; nil when none.
func changedGroups(old, cur []bus.Group) map[string]bool {
	if slices.EqualFunc(old, cur, bus.Group.Equal) {
		return nil
	}
	was := make(map[string]bus.Group, len(old))
	for _, g := range old {
		was[g.Name] = g
	}
	out := map[string]bool{}
	for _, g := range cur {
		if o, ok := was[g.Name]; !ok || !o.Equal(g) {
			out[g.Name] = true
		}
		delete(was, g.Name)
	}
	for name := range was {
		out[name] = true
	}
	return out
}

// inGroups reports whether d is in one of the named groups.
func inGroups(d *bus.ToolDef, names map[string]bool) bool {
	return len(names) > 0 && slices.ContainsFunc(d.Groups, func(g string) bool { return names[g] })
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
	return search.Doc{Fields: fs, Key: d.Name}
}

// match is one search result.
type match struct {
	name, kind, desc string
	groups           []string
	visible          bool   // callable now
	activate         string // the meta group that makes it visible; "" when visible or none can
}

// reach says whether the session can find t: visible, or via a meta group.
func (v *View) reach(t *registry.Tool) (visible bool, via string, ok bool) {
	if v.req.Mode == bus.MergeExternalOnly || v.req.external(t.Def.Name) != nil || !v.reg.Live(t) {
		return false, "", false
	}
	if _, vis := v.inactiveGroup(t); vis {
		return true, "", true
	}
	return viaMeta(v.store.allGroups(), v.groupsOf(t))
}

// viaMeta is reach through the first meta group of groups that holds it.
func viaMeta(groups []bus.Group, names []string) (visible bool, via string, ok bool) {
	for _, g := range groups {
		if g.Scope == bus.ScopeMeta && slices.Contains(names, g.Name) {
			return false, g.Name, true
		}
	}
	return false, "", false
}

// skillReach is reach for a skill: one without groups is always loadable;
// else through an active group, or a meta group the model may activate.
func (v *View) skillReach(sk SkillDoc) (visible bool, via string, ok bool) {
	active := func(g string) bool { return v.sess.IsActive(g) || v.store.pinnedGroup(g) }
	if len(sk.Groups) == 0 || slices.ContainsFunc(sk.Groups, active) {
		return true, "", true
	}
	return viaMeta(v.store.Groups(), sk.Groups)
}

// Search runs search_tools: it ranks what the session could reach and with activate
// switches the matches' groups on; errors are invalid_input and change nothing.
func (v *View) Search(ctx context.Context, session string, input json.RawMessage, skills []SkillDoc) (string, error) {
	in, err := ParseSearch(input)
	if err != nil {
		return "", err
	}
	ms := v.find(in.Query, in.Limit, skills)
	if len(ms) == 0 {
		return fmt.Sprintf("No tool matches %q. Try other words.", in.Query), nil
	}
	var b strings.Builder
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
		groups := cmp.Or(strings.Join(m.groups, ", "), "basic") // group names are never empty (ValidName)
		fmt.Fprintf(&b, "%d. %s %s (group: %s; %s): %s\n", i+1, m.kind, m.name, groups, state, firstLine(m.desc))
	}
	if !in.Activate {
		if len(add) > 0 {
			b.WriteString("Call search_tools again with \"activate\": true, or reset_tools, to activate the groups of inactive matches.")
		}
		return strings.TrimRight(b.String(), "\n"), nil
	}
	text, err := v.store.activate(ctx, session, func(cur []string) []string {
		return append(slices.Clone(cur), slices.DeleteFunc(slices.Clone(add), func(g string) bool { return slices.Contains(cur, g) })...)
	})
	if err != nil {
		return "", err
	}
	return b.String() + text, nil
}

// find ranks tools and skills the session could reach for query (at most limit).
func (v *View) find(query string, limit int, skills []SkillDoc) []match {
	ti, done := v.store.index(v.reg)
	defer done()
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
	slices.SortStableFunc(all, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	out := make([]match, min(limit, len(all)))
	for i := range out {
		out[i] = all[i].m
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

const resetDescription = "Activate or deactivate tool groups. Pass the final set: every group set to true is active " +
	"afterwards and every other group is inactive. Deactivate groups you no longer need."

// activation switches meta groups for reset_tools and search_tools.
type activation struct {
	defs     *definitions
	sessions *session.Store
	pinned   []string // the groups pinned visible (Config.Pinned)
}

// Reset runs reset_tools (the final meta groups); bad input changes nothing.
func (a *activation) Reset(ctx context.Context, session string, input json.RawMessage) (string, error) {
	meta := a.defs.metaGroups()
	// Each group twice and a few unknown names at most: a megabyte of one
	// name repeated cost 60-160 ms here (session 37).
	keys, vals, err := orderedObject(input, 2*len(meta)+16)
	if err != nil {
		return "", bus.Errorf(bus.CodeInvalidInput, "Invalid arguments: %v", err)
	}
	isMeta := metaIn(meta)
	if bad := slices.DeleteFunc(slices.Clone(keys), isMeta); len(bad) > 0 {
		names := make([]string, len(meta))
		for i, g := range meta {
			names[i] = g.Name
		}
		return "", bus.Errorf(bus.CodeInvalidInput, "Invalid group name(s): %s. The current available groups are: %s",
			strings.Join(bad, ", "), strings.Join(names, ", "))
	}
	final := map[string]bool{} // a repeated key: the last value counts
	for i, k := range keys {
		if typ := schemas.Kind(vals[i]); typ != "boolean" { // a decoded value: no white space around it
			return "", bus.Errorf(bus.CodeInvalidInput, "Invalid arguments: the argument '%s' should be a bool value, but got %s.", k, typ)
		}
		final[k] = string(bytes.TrimSpace(vals[i])) == "true"
	}
	var on []string
	for _, k := range keys {
		if final[k] {
			on, final[k] = append(on, k), false // once
		}
	}
	return a.activate(ctx, session, func([]string) []string { return on })
}

// activate is the one path changing a session's meta groups: one
// compare-and-set sets them to final(current). It returns reset_tools' text.
func (a *activation) activate(ctx context.Context, session string, final func(cur []string) []string) (string, error) {
	meta := a.defs.metaGroups()
	isMeta := metaIn(meta)
	var on []string
	_, err := a.sessions.Update(ctx, session, func(sess *Session) error {
		cur := slices.DeleteFunc(slices.Clone(sess.Active), func(n string) bool { return !isMeta(n) })
		on = slices.DeleteFunc(slices.Clone(final(cur)), func(n string) bool { return !isMeta(n) })
		sess.Active = slices.DeleteFunc(sess.Active, isMeta)
		sess.Active = append(sess.Active, on...)
		return nil
	})
	if err != nil {
		return "", err
	}
	var names, instr []string
	for _, g := range meta {
		if slices.Contains(on, g.Name) {
			names = append(names, g.Name)
			if g.Instructions != "" {
				instr = append(instr, fmt.Sprintf(`<group name="%s">%s</group>`, g.Name, g.Instructions))
			}
		}
	}
	pinned := slices.DeleteFunc(slices.Clone(a.pinned), func(g string) bool {
		_, defined := a.defs.Group(g)
		return slices.Contains(names, g) || !defined && g != bus.GroupBasic
	})
	if len(names) == 0 {
		if len(pinned) > 0 {
			return "All tool groups are currently deactivated, except the pinned group(s), always active: " + strings.Join(pinned, ", ") + ".", nil
		}
		return "All tool groups are currently deactivated.", nil
	}
	text := "The currently activated tool group(s): " + strings.Join(names, ", ") + "."
	if len(pinned) > 0 {
		text += " The pinned group(s) stay active: " + strings.Join(pinned, ", ") + "."
	}
	if len(instr) > 0 {
		text += "\n<tool-instructions>\nThe tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups.\n" +
			strings.Join(instr, "\n") + "\n</tool-instructions>"
	}
	return text, nil
}

// metaIn says whether a name is one of the groups meta, without a scan
// (reset_tools reads up to twice as many names as there are groups).
func metaIn(meta []bus.Group) func(string) bool {
	names := make(map[string]bool, len(meta))
	for _, g := range meta {
		names[g.Name] = true
	}
	return func(n string) bool { return names[n] }
}

// orderedObject splits a JSON object into its keys and raw values in input
// order; past max members (0: no bound) it reads no further.
func orderedObject(b json.RawMessage, max int) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("input must be a JSON object")
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		if max > 0 && len(keys) == max {
			return nil, nil, fmt.Errorf("the input has more than %d members, more members than there are groups to switch; name each group once", max)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, tok.(string))
		vals = append(vals, v)
	}
	return keys, vals, nil
}
