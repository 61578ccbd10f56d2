package registry_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
)

// TestAttackRouterToolLookalikes (session 34, red team on 1.23's reserved
// names): a worker registers a name that looks like one the router lists
// itself. Other Unicode forms (a Cyrillic "е", a zero-width space, a
// fullwidth letter, a trailing space) are no valid names at all (ASCII
// only); other cases and separators are names of their own, which nothing
// in toolbus or its adapters folds (every match is exact), so they are
// tools of the worker beside the router's, never the router's.
func TestAttackRouterToolLookalikes(t *testing.T) {
	def := func(name string) *bus.ToolDef {
		d := &bus.ToolDef{Name: name, Description: "Activate or deactivate tool groups.", InputSchema: json.RawMessage(`{"type":"object"}`)}
		d.Defaults() // as Register does
		return d
	}
	for _, name := range []string{"reset_tools", "search_tools", "load_skill_through_path", "Skill"} {
		if reason, _ := registry.Check(def(name)); !strings.Contains(reason, "lists itself") {
			t.Errorf("%s: %q", name, reason)
		}
	}
	for _, name := range []string{"rеset_tools", "reset_tools\u200b", "Ｓkill", "Skill ", "reset_tools\x00", "load_skill_through_path/"} {
		if reason, _ := registry.Check(def(name)); !strings.Contains(reason, "must match") {
			t.Errorf("%q taken (%q)", name, reason)
		}
	}
	for _, name := range []string{"Reset_tools", "RESET_TOOLS", "reset-tools", "skill", "SKILL", "Search_Tools", "load_skill_through_path_"} {
		if bus.RouterTool(name) {
			t.Errorf("%s is reserved: then every case would have to be", name)
		}
		if reason, _ := registry.Check(def(name)); reason != "" {
			t.Errorf("%s refused: %s", name, reason)
		}
	}
}
