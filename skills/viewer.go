package skills

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/bus"
)

// ViewerName is the name of AgentScope's skill viewer tool, which a router
// offers beside the loader when configured to (docs/protocol.md 10).
const ViewerName = "Skill"

// viewerDescription and the schema's property text are AgentScope's own
// (agentscope 2.0.11, tool/_builtin/_skill.py), so a model trained on its
// prompts sees the tool it knows.
const viewerDescription = "Retrieve a skill within the conversation. When users asks you to perform tasks, " +
	"check if any of the available skills match. Skills provide specialized capabilities and domain knowledge."

const viewerSchema = `{"type":"object","properties":{"skill":{"type":"string","description":"The exact name of the skill to view. "}},"required":["skill"]}`

// ViewerDef returns the definition of the Skill viewer for the view; false
// when no skill is visible. Like the loader it is read-only, never asked
// about and, since a view activates groups, not concurrency-safe.
func (v *View) ViewerDef() (bus.ToolDef, bool) {
	return v.toolDef(ViewerName, viewerDescription, func() string { return viewerSchema })
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
	load, _ := json.Marshal(LoadInput{SkillID: in.Skill, Path: File})
	out := v.Load(groups, load)
	if out.Code != "" {
		return out
	}
	s, _ := v.Lookup(in.Skill)
	out.Output = bus.Text(strings.TrimSpace(s.Body))
	return out
}
