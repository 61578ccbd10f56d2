package embedded

import (
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/skills"
)

// TestSkillViewer: with SkillViewer on, the router lists AgentScope's Skill
// viewer right before the loader; a view answers the SKILL.md body alone,
// activates what a load activates, and refuses a hidden skill with
// AgentScope's text. Off (the default), Skill is an unknown tool.
func TestSkillViewer(t *testing.T) {
	root := t.TempDir()
	writeSkill(t, root, "pdf", "Fill PDF forms.", nil)
	writeSkill(t, root, "web", "Browse the web.", nil)

	off := startEnv(t, 1, false, router.Config{Skills: []string{root}})
	if got := listNames(t, off.toolsFor(t, "s1", "")); slices.Contains(got, skills.ViewerName) {
		t.Fatalf("viewer listed without SkillViewer: %v", got)
	}
	wantFailure(t, call1(t, off.client, "s1", skills.ViewerName, `{"skill":"pdf"}`), bus.StateError, bus.CodeUnknownTool, "")

	e := startEnv(t, 1, false, router.Config{Skills: []string{root}, SkillViewer: true})
	for _, g := range []bus.Group{
		{Name: "docs", Description: "Document tools.", Scope: bus.ScopeMeta, ActivateOnSkill: "pdf"},
		{Name: "browse", Description: "Browsing.", Scope: bus.ScopeMeta, Skills: []string{"web"}},
	} {
		if err := e.client.Admin(t.Context(), "groups.put", "", g, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.waitGroups("docs", "browse")
	if got := listNames(t, e.toolsFor(t, "s1", "")); !slices.Equal(got, []string{"reset_tools", skills.ViewerName, skills.LoaderName}) {
		t.Fatalf("tools %v, want reset_tools, Skill, the loader", got)
	}
	wantSuccess(t, call1(t, e.client, "s1", skills.ViewerName, `{"skill":"pdf"}`), "# pdf\nFollow these steps.")
	var sess struct {
		Groups []struct {
			Name   string
			Active bool
		}
	}
	if err := e.client.Admin(t.Context(), "session.get", "s1", struct{}{}, &sess); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(sess.Groups, func(g struct {
		Name   string
		Active bool
	}) bool {
		return g.Name == "docs" && g.Active
	}) {
		t.Fatalf("viewing pdf did not activate docs: %+v", sess)
	}
	wantFailure(t, call1(t, e.client, "s1", skills.ViewerName, `{"skill":"web"}`), bus.StateError, bus.CodeInvalidInput,
		"SkillNotFoundError: Skill 'web' not found.")
	wantFailure(t, call1(t, e.client, "s1", skills.ViewerName, `{}`), bus.StateError, bus.CodeInvalidInput, "")
}
