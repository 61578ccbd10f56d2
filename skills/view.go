package skills

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
)

// LoaderName is the name of the built-in skill loader.
const LoaderName = "load_skill_through_path"

// View is the set of skills one session of one user sees.
type View struct {
	skills []*Skill // sorted by name
}

// NewView keeps the candidates visible in a session: those no group lists,
// and those of an active group.
func NewView(candidates []*Skill, groups []bus.Group, active func(group string) bool) *View {
	v := &View{}
	for _, s := range candidates {
		owners := GroupsOf(s.Name, groups)
		if len(owners) == 0 || slices.ContainsFunc(owners, active) {
			v.skills = append(v.skills, s)
		}
	}
	slices.SortFunc(v.skills, func(a, b *Skill) int { return strings.Compare(a.Name, b.Name) })
	return v
}

// GroupsOf returns the names of the groups whose skills list name, in the
// order of groups.
func GroupsOf(name string, groups []bus.Group) []string {
	return groupNames(groups, func(g bus.Group) bool { return slices.Contains(g.Skills, name) })
}

// groupNames returns the names of the groups that match, in order.
func groupNames(groups []bus.Group, match func(bus.Group) bool) (names []string) {
	for _, g := range groups {
		if match(g) {
			names = append(names, g.Name)
		}
	}
	return names
}

// Skills returns the visible skills sorted by name.
func (v *View) Skills() []*Skill { return v.skills }

// Empty reports whether no skill is visible.
func (v *View) Empty() bool { return len(v.skills) == 0 }

// Lookup returns the visible skill called name.
func (v *View) Lookup(name string) (*Skill, bool) {
	i, ok := slices.BinarySearchFunc(v.skills, name, func(s *Skill, n string) int { return strings.Compare(s.Name, n) })
	if !ok {
		return nil, false
	}
	return v.skills[i], true
}

// Names returns the visible skill names, sorted.
func (v *View) Names() []string {
	out := make([]string, len(v.skills))
	for i, s := range v.skills {
		out[i] = s.Name
	}
	return out
}

const loaderDescription = "Load an agent skill: its SKILL.md (instructions to read before following the skill) " +
	"or one of its resource files (scripts, references, assets) by path."

// LoaderDef defines load_skill_through_path; false when no skill is visible.
func (v *View) LoaderDef() (bus.ToolDef, bool) {
	enum, _ := json.Marshal(v.Names())
	schema := fmt.Sprintf(`{"type":"object","properties":{"skillId":{"type":"string","enum":%s,"description":"The name of the skill to load."},`+
		`"path":{"type":"string","description":"The file to read, relative to the skill's folder with /: SKILL.md for the skill's instructions, or a resource path such as scripts/run.sh."}},`+
		`"required":["skillId","path"]}`, enum)
	return v.toolDef(LoaderName, loaderDescription, schema)
}

// toolDef defines one of the view's tools; false when no skill is visible.
func (v *View) toolDef(name, description, schema string) (bus.ToolDef, bool) {
	if v.Empty() {
		return bus.ToolDef{}, false
	}
	d := bus.ToolDef{Name: name, Description: description, InputSchema: json.RawMessage(schema),
		ReadOnly: true, ConcurrencySafe: false, Permission: bus.PermissionAllow}
	d.Defaults()
	return d, true
}

// LoadInput is the input of load_skill_through_path.
type LoadInput struct {
	SkillID string `json:"skillId"`
	Path    string `json:"path"`
}

// Outcome is what a load returns: the output, an error code ("" on
// success) and the groups to activate in the session.
type Outcome struct {
	Output   []bus.Block
	Code     string
	Activate []string
}

// Load runs load_skill_through_path on the view (groups: the defined ones,
// for activate_on_skill). The caller activates Outcome.Activate.
func (v *View) Load(groups []bus.Group, input json.RawMessage) Outcome {
	var in LoadInput
	if err := json.Unmarshal(input, &in); err != nil {
		return failure(bus.CodeInvalidInput, fmt.Sprintf("Invalid arguments: %v", err))
	}
	return v.load(groups, in)
}

func (v *View) load(groups []bus.Group, in LoadInput) Outcome {
	s, ok := v.Lookup(in.SkillID)
	if !ok {
		return failure(bus.CodeInvalidInput, fmt.Sprintf("SkillNotFoundError: Skill '%s' not found.", in.SkillID))
	}
	var out []bus.Block
	if in.Path == File {
		out = bus.Text(fmt.Sprintf("Skill: %s\nDescription: %s\nSource: %s\n\n%s", s.Name, s.Description, s.Source, s.Body))
	} else {
		b, ok := s.File(in.Path)
		if !ok || checkPath(in.Path) != nil {
			return failure(bus.CodeInvalidInput, NotFoundText(s, in.Path))
		}
		out = []bus.Block{ResourceBlock(in.Path, b)}
	}
	return Outcome{Output: out, Activate: groupNames(groups, func(g bus.Group) bool { return g.ActivateOnSkill == s.Name })}
}

func failure(code, text string) Outcome { return Outcome{Output: bus.Text(text), Code: code} }

// NotFoundText is the refusal of a path that is not a resource of s.
func NotFoundText(s *Skill, p string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Resource not found: '%s' in skill '%s'.\nAvailable resources:", p, s.Name)
	for i, r := range s.Resources() {
		fmt.Fprintf(&b, "\n%d. %s", i+1, r)
	}
	return b.String()
}

// ResourceBlock returns a file as a text block when it is UTF-8 text, else
// as a data block with its media type (by extension, else by content).
func ResourceBlock(p string, b []byte) bus.Block {
	if utf8.Valid(b) && !bytes.ContainsRune(b, 0) {
		return bus.Block{Type: bus.BlockText, Text: string(b)}
	}
	mt := mime.TypeByExtension(path.Ext(p))
	if mt == "" {
		mt = http.DetectContentType(b)
	}
	mt, _, _ = strings.Cut(mt, ";")
	return bus.Block{Type: bus.BlockData, MediaType: strings.TrimSpace(mt), Data: base64.StdEncoding.EncodeToString(b)}
}

// Prompt returns the skills_prompt of the view: the visible skills, and
// how to load one; "" when none is visible.
func (v *View) Prompt() string {
	if v.Empty() {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Agent skills\n")
	b.WriteString("Skills are folders of instructions, scripts and resources that make you better at specific tasks. ")
	b.WriteString("Before you follow a skill, load its SKILL.md with the tool " + LoaderName +
		" (skillId: the skill's name, path: \"SKILL.md\") and read it carefully; load its other files the same way when SKILL.md refers to them.\n")
	for _, s := range v.skills {
		fmt.Fprintf(&b, "\n## %s\n%s\n", s.Name, s.Description)
	}
	return b.String()
}

// ViewerName is the name of AgentScope's skill viewer tool, which a router
// offers beside the loader when configured to (docs/protocol.md 10).
const ViewerName = "Skill"

// viewerDescription and the schema's property text are AgentScope's own
// (agentscope 2.0.11, tool/_builtin/_skill.py), so a model trained on its
// prompts sees the tool it knows.
const viewerDescription = "Retrieve a skill within the conversation. When users asks you to perform tasks, " +
	"check if any of the available skills match. Skills provide specialized capabilities and domain knowledge."

const viewerSchema = `{"type":"object","properties":{"skill":{"type":"string","description":"The exact name of the skill to view. "}},"required":["skill"]}`

// ViewerDef defines the Skill viewer; false when no skill is visible.
func (v *View) ViewerDef() (bus.ToolDef, bool) {
	return v.toolDef(ViewerName, viewerDescription, viewerSchema)
}

// ViewInput is the input of the Skill viewer.
type ViewInput struct {
	Skill string `json:"skill"`
}

// View runs the Skill viewer: the SKILL.md body of a visible skill, without
// its front matter and surrounding blank lines (what AgentScope's viewer
// returns). It activates what loading the skill's SKILL.md activates.
func (v *View) View(groups []bus.Group, input json.RawMessage) Outcome {
	var in ViewInput
	if err := json.Unmarshal(input, &in); err != nil {
		return failure(bus.CodeInvalidInput, fmt.Sprintf("Invalid arguments: %v", err))
	}
	out := v.load(groups, LoadInput{SkillID: in.Skill, Path: File})
	if s, ok := v.Lookup(in.Skill); ok {
		out.Output = bus.Text(strings.TrimSpace(s.Body))
	}
	return out
}
