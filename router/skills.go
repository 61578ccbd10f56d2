package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/store"
)

// routerSkills is the skill catalogue and the compiled loader schemas.
type routerSkills struct {
	cat    *skills.Catalogue
	groups *groups.Store
	viewer bool // also offer AgentScope's Skill viewer (Config.SkillViewer)
	// schemas are the loader schemas compiled, the last maxLoaderSchemas used.
	schemas *lru.Cache[string, *schemas.Schema]
}

const maxLoaderSchemas = 256

func startSkills(ctx context.Context, dirs []string, viewer bool, st *store.Store, gs *groups.Store, log *slog.Logger) (*routerSkills, error) {
	cat := skills.NewCatalogue(skills.Config{Dirs: dirs, Objects: st.Skills, Logger: log})
	if err := cat.Start(ctx); err != nil {
		return nil, fmt.Errorf("router: skills: %w", err)
	}
	sc, _ := lru.New[string, *schemas.Schema](maxLoaderSchemas) // fails only for a size below 1
	return &routerSkills{cat: cat, groups: gs, viewer: viewer, schemas: sc}, nil
}

// Skills returns the router's skill catalogue.
func (r *Router) Skills() *skills.Catalogue { return r.skills.cat }

// userOf is the user of a batch or query for skill scoping: a JSON string's
// value, "" for none or null, else the value's compact JSON text.
func userOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		return buf.String()
	}
	return string(raw)
}

// view is what a session of user sees of the catalogue.
func (s *routerSkills) view(sess *groups.Session, user string) *skills.View {
	return skills.NewView(s.cat.Skills(user), s.groups.Groups(), sess.IsActive)
}

// shown reports whether the request lets the built-in tool name be seen:
// not in external_only, and not shadowed by a request-scoped tool.
func shown(req *groups.Request, name string) bool {
	return req.Mode != bus.MergeExternalOnly && !slices.ContainsFunc(req.External, func(t *groups.RequestTool) bool { return t.Def.Name == name })
}

func loaderShown(req *groups.Request) bool { return shown(req, skills.LoaderName) }

// listing puts the skill loader (and viewer) before the request's external
// tools when a skill is visible, and returns the skills_prompt.
func (s *routerSkills) listing(view *groups.View, req *groups.Request, user string, defs []bus.ToolDef) ([]bus.ToolDef, string) {
	if !loaderShown(req) {
		return defs, ""
	}
	sv := s.view(view.Session(), user)
	def, ok := sv.LoaderDef()
	if !ok {
		return defs, ""
	}
	at := len(defs) - len(req.External)
	add := []bus.ToolDef{def}
	if vd, ok := s.viewerDef(sv, req); ok {
		add = []bus.ToolDef{vd, def}
	}
	defs = slices.Insert(slices.Clip(defs), at, add...)
	return defs, sv.Prompt()
}

// resolveName resolves the skill loader when shown and useful, else via view.
func (s *routerSkills) resolveName(view *groups.View, req *groups.Request, user json.RawMessage, name string) groups.Resolved {
	if (name != skills.LoaderName && name != skills.ViewerName) || !loaderShown(req) {
		return view.Resolve(name)
	}
	sv := s.view(view.Session(), userOf(user))
	def, ok := sv.LoaderDef()
	if name == skills.ViewerName {
		def, ok = s.viewerDef(sv, req)
	}
	if !ok {
		return view.Resolve(name)
	}
	schema, err := s.schema(def.InputSchema)
	if err != nil { // cannot happen: the schema is built here
		return groups.Resolved{Code: bus.CodeInternal, Message: fmt.Sprintf("InternalError: %v", err)}
	}
	return groups.Resolved{Tool: &registry.Tool{Def: def, Schema: schema}, Skill: true}
}

// viewerDef is the Skill viewer's definition when offered and shown.
func (s *routerSkills) viewerDef(sv *skills.View, req *groups.Request) (bus.ToolDef, bool) {
	if !s.viewer || !shown(req, skills.ViewerName) {
		return bus.ToolDef{}, false
	}
	return sv.ViewerDef()
}

func (s *routerSkills) schema(raw json.RawMessage) (*schemas.Schema, error) {
	if sc, ok := s.schemas.Get(string(raw)); ok {
		return sc, nil
	}
	sc, err := schemas.Compile(raw)
	if err == nil {
		s.schemas.Add(string(raw), sc)
	}
	return sc, err
}

// loadSkill runs the loader (or viewer), activating its skill's groups.
func (s *routerSkills) loadSkill(ctx context.Context, session string, user json.RawMessage, call bus.Call, input json.RawMessage) bus.Result {
	gs := s.groups.Groups()
	sv := s.view(s.groups.Session(session), userOf(user))
	var out skills.Outcome
	if call.Name == skills.ViewerName {
		out = sv.View(gs, input)
	} else {
		out = sv.Load(gs, input)
	}
	if out.Code != "" {
		return bus.ErrorResult(call, out.Code, textOf(out.Output))
	}
	if len(out.Activate) > 0 {
		_, err := s.groups.Update(ctx, session, func(sess *groups.Session) error {
			for _, g := range out.Activate {
				if !slices.Contains(sess.Active, g) {
					sess.Active = append(sess.Active, g)
				}
			}
			return nil
		})
		if err != nil {
			return builtinResult(call, "", err)
		}
	}
	return bus.Result{ID: call.ID, Name: call.Name, State: bus.StateSuccess, Output: out.Output}
}

// skillsList is the reply of skills.list: every served skill.
func (x *adminVerbs) skillsList() map[string]any {
	gs := x.groups.Groups()
	out := []bus.SkillInfo{}
	for _, s := range x.skills.All() {
		g := skills.GroupsOf(s.Name, gs)
		if g == nil {
			g = []string{}
		}
		out = append(out, bus.SkillInfo{Name: s.Name, Description: s.Description, Source: s.Source, User: s.User, Groups: g, Digest: s.Digest})
	}
	return map[string]any{"skills": out}
}
