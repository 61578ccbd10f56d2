package groups

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/schemas"
)

// ResetTools is the name of the built-in group switch.
const ResetTools = "reset_tools"

// Request is a checked request-scoped tool configuration.
type Request struct {
	Mode     string
	External []*RequestTool
	byName   map[string]*RequestTool // External's, so a listing's or search's check of a name costs no scan (session 37)
}

// RequestTool is a schema-only tool the caller executes itself.
type RequestTool struct {
	Def    bus.ToolDef
	Schema *schemas.Schema
}

// defaultRequest is what a batch without a request configuration gets: one shared,
// never-changed value, so the usual batch costs no allocation here.
var defaultRequest = &Request{Mode: bus.MergeExternalPriority}

// CheckRequest validates a request-scoped configuration (nil means the
// default) and compiles its tools' schemas. Errors are bad_request. The
// Request returned is shared and must not be changed.
func CheckRequest(r *bus.Request) (*Request, error) {
	if r == nil {
		return defaultRequest, nil
	}
	out := &Request{Mode: bus.MergeExternalPriority}
	switch r.MergeMode {
	case "", bus.MergeExternalPriority:
	case bus.MergeExternalOnly, bus.MergeAgentOnly:
		out.Mode = r.MergeMode
	default:
		return nil, bus.Errorf(bus.CodeBadRequest, "merge_mode %q must be merge_external_priority, external_only or agent_only", r.MergeMode)
	}
	if out.Mode == bus.MergeAgentOnly && len(r.ExternalTools) > 0 {
		return nil, bus.Errorf(bus.CodeBadRequest, "agent_only cannot include external tools")
	}
	out.byName = make(map[string]*RequestTool, len(r.ExternalTools))
	nodes := 0
	for _, t := range r.ExternalTools {
		if !bus.ValidName(t.Name) {
			return nil, bus.Errorf(bus.CodeBadRequest, "external tool name %q must match ^[A-Za-z0-9_-]{1,64}$", t.Name)
		}
		if out.byName[t.Name] != nil {
			return nil, bus.Errorf(bus.CodeBadRequest, "external tool %q is listed twice", t.Name)
		}
		// Cached; the request's schemas count together (protocol 4.3, 13).
		s, err := schemas.Compile(t.InputSchema)
		if err != nil {
			return nil, bus.Errorf(bus.CodeBadRequest, "external tool %s: %v", t.Name, err)
		}
		if nodes += s.Subschemas(); nodes > schemas.MaxSubschemas {
			return nil, bus.Errorf(bus.CodeBadRequest, "external tool %s: the request's external tools have more than %d subschemas together", t.Name, schemas.MaxSubschemas)
		}
		def := bus.ToolDef{Name: t.Name, Description: t.Description, InputSchema: s.Raw(), External: true, ConcurrencySafe: true}
		def.Defaults()
		out.External = append(out.External, &RequestTool{Def: def, Schema: s})
		out.byName[t.Name] = out.External[len(out.External)-1]
	}
	return out, nil
}

func (r *Request) external(name string) *RequestTool { return r.byName[name] }

// View is the tool set one session sees under one request (no KV reads).
type View struct {
	store *Store
	reg   *registry.Registry
	sess  *Session
	req   *Request
}

// View composes the session's view under req (nil means the default).
func (s *Store) View(reg *registry.Registry, sess *Session, req *Request) *View {
	return &View{store: s, reg: reg, sess: sess, req: cmp.Or(req, defaultRequest)}
}

// Session returns the session the view was built for.
func (v *View) Session() *Session { return v.sess }

// Resolved is the outcome of resolving a call's name.
type Resolved struct {
	// Exactly one of Tool, External and Reset is set when Code is "".
	Tool     *registry.Tool
	External *RequestTool
	Reset    bool
	// Search is search_tools, which the router runs like reset_tools.
	Search bool
	// Read marks read_output, run by the router (Tool set by it).
	Read bool
	// Skill marks the skill loader, run by the router (Tool set by it).
	Skill bool
	// Code and Message describe why the name cannot be called.
	Code    string
	Message string
}

// notFound is the resolution of a name nothing serves.
func notFound(name string) Resolved {
	return Resolved{Code: bus.CodeUnknownTool, Message: fmt.Sprintf("ToolNotFoundError: The tool named '%s' doesn't exist.", name)}
}

// Resolve finds what a call named name runs (docs/protocol.md 4.3).
func (v *View) Resolve(name string) Resolved {
	if t := v.req.external(name); t != nil {
		return Resolved{External: t}
	}
	if v.req.Mode == bus.MergeExternalOnly {
		return notFound(name)
	}
	if name == ResetTools && v.store.hasMeta() {
		return Resolved{Reset: true}
	}
	if _, ok := v.store.searchDef(); ok && name == SearchTools {
		return Resolved{Search: true}
	}
	t, ok := v.reg.Lookup(name)
	if !ok {
		return notFound(name)
	}
	if g, ok := v.inactiveGroup(t); !ok {
		return Resolved{Code: bus.CodeInactiveTool, Message: fmt.Sprintf(
			"ToolGroupInactiveError: The tool '%s' in group '%s' is currently inactive. You should first activate the group by calling the 'reset_tools' tool.", name, g)}
	}
	if !v.reg.Live(t) {
		return Resolved{Code: bus.CodeUnavailable, Message: fmt.Sprintf("ToolUnavailableError: No live worker serves the tool '%s' right now.", name)}
	}
	return Resolved{Tool: t}
}

// inactiveGroup reports whether t is visible; when it is not, it returns
// the tool's first group in registration order (basic first, with search).
func (v *View) inactiveGroup(t *registry.Tool) (string, bool) {
	gs := v.groupsOf(t)
	visible := func(g string) bool { return v.store.pinnedGroup(g) || v.active(g) }
	if len(gs) == 0 || v.store.pinnedTool(t.Def.Name) || slices.ContainsFunc(gs, visible) {
		return "", true
	}
	for _, g := range v.store.allGroups() {
		if slices.Contains(gs, g.Name) {
			return g.Name, false
		}
	}
	return gs[0], false
}

// groupsOf is t's groups; a tool without groups is in basic, which only
// search makes a group the model switches (without search such a tool is
// always visible, so it has none here).
func (v *View) groupsOf(t *registry.Tool) []string {
	if len(t.Def.Groups) == 0 && v.store.searchBasic {
		return []string{bus.GroupBasic}
	}
	return t.Def.Groups
}

// active reports whether g is active for the view's session: a defined
// group the session activated, or basic (always, unless search is on; then
// when the session activated it).
func (v *View) active(g string) bool {
	if g == bus.GroupBasic {
		return !v.store.searchBasic || slices.Contains(v.sess.Active, g)
	}
	if !v.sess.IsActive(g) {
		return false
	}
	_, defined := v.store.Group(g)
	return defined
}

// Tools returns the definitions the model sees: active tools with a live
// worker, reset_tools, then the request's tools, which replace namesakes.
func (v *View) Tools() []bus.ToolDef {
	var out []bus.ToolDef
	if v.req.Mode != bus.MergeExternalOnly {
		for _, t := range v.reg.Tools() {
			if v.req.external(t.Def.Name) != nil {
				continue
			}
			if _, ok := v.inactiveGroup(t); ok && v.reg.Live(t) {
				out = append(out, t.Def)
			}
		}
		if d, ok := v.store.resetDef(); ok && v.req.external(ResetTools) == nil {
			out = append(out, d)
		}
		if d, ok := v.store.searchDef(); ok && v.req.external(SearchTools) == nil {
			out = append(out, d)
		}
	}
	for _, t := range v.req.External {
		out = append(out, t.Def)
	}
	return out
}

// Groups returns basic and every defined group with its activation; with
// search on, basic is listed as a meta group the model switches.
func (v *View) Groups() []bus.GroupInfo {
	basic := bus.GroupInfo{Name: bus.GroupBasic, Description: "Tools that are always available.", Scope: bus.ScopeBasic, Active: true}
	if v.store.searchBasic {
		basic.Description, basic.Scope = BasicSearchDescription, bus.ScopeMeta
		basic.Active = v.active(bus.GroupBasic) || v.store.pinnedGroup(bus.GroupBasic)
	}
	out := []bus.GroupInfo{basic}
	for _, g := range v.store.Groups() {
		out = append(out, bus.GroupInfo{Name: g.Name, Description: g.Description, Scope: g.Scope, Active: v.sess.IsActive(g.Name)})
	}
	return out
}

// Deferred returns, for a deferred listing (docs/protocol.md 4.1), each inactive
// meta group with the tools reach could activate, and each such tool's group.
func (v *View) Deferred() ([]schemas.Namespace, map[string]string) {
	byGroup := map[string][]bus.ToolDef{}
	of := map[string]string{}
	for _, t := range v.reg.Tools() {
		visible, via, ok := v.reach(t)
		if !ok || visible || via == "" {
			continue
		}
		byGroup[via] = append(byGroup[via], t.Def)
		of[t.Def.Name] = via
	}
	out := []schemas.Namespace{}
	for _, g := range v.store.allGroups() {
		if g.Scope == bus.ScopeMeta && len(byGroup[g.Name]) > 0 {
			out = append(out, schemas.Namespace{Name: g.Name, Description: g.Description, Tools: byGroup[g.Name]})
		}
	}
	return out, of
}
