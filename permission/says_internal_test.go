package permission

import (
	"fmt"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestToolSays: the reasons a tool's own allow gives are the same whether
// built or kept (toolSays), under a rule set that decides some calls first.
func TestToolSays(t *testing.T) {
	rules := []bus.Rule{{Tool: "gone", Behavior: Deny}, {Tool: "*", Pattern: "x", Behavior: Ask},
		{Tool: "lookup", Behavior: Ask}, {Tool: "notes", Behavior: Allow}}
	look := &bus.ToolDef{Name: "look", ReadOnly: true}
	deploy := &bus.ToolDef{Name: "deploy", Permission: bus.PermissionAllow}
	for _, tc := range []struct {
		mode   string
		def    *bus.ToolDef
		reason string
	}{
		{Default, look, "tool look is read-only"},
		{Explore, look, "tool look is read-only"},
		{DontAsk, look, "tool look is read-only"},
		{Default, deploy, "tool deploy allows it"},
		{Bypass, deploy, "tool deploy allows it"},
		{AcceptEdits, deploy, "tool deploy allows it"},
		{Default, &bus.ToolDef{Name: "gone", ReadOnly: true}, "rule gone denies it"},
		{Default, &bus.ToolDef{Name: "lookup", ReadOnly: true, Permission: bus.PermissionAllow}, "rule lookup asks for confirmation"},
		{Default, &bus.ToolDef{Name: "notes"}, "rule notes allows it"},
		{Bypass, &bus.ToolDef{Name: "notes"}, "rule notes allows it"},
		{Explore, deploy, "explore mode denies tools that are not read-only"},
	} {
		for i := range 3 { // built, then kept
			if d := Decide(Context{Mode: tc.mode, Rules: rules}, tc.def, nil); d.Reason != tc.reason {
				t.Errorf("%s, %s, call %d: %q, want %q", tc.mode, tc.def.Name, i, d.Reason, tc.reason)
			}
		}
	}
}

// TestAttackToolSaysBounded: a worker that registers tool after tool (or
// a caller of Decide with names of its own) does not grow the kept reasons
// past maxSaid; a name past the bound still gets its own reasons.
func TestAttackToolSaysBounded(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				name := fmt.Sprintf("t%d_%d", g, i)
				d := Decide(Context{}, &bus.ToolDef{Name: name, ReadOnly: true}, nil)
				a := Decide(Context{}, &bus.ToolDef{Name: name, Permission: bus.PermissionAllow}, nil)
				if d.Reason != "tool "+name+" is read-only" || a.Reason != "tool "+name+" allows it" {
					t.Errorf("%s: %q, %q", name, d.Reason, a.Reason)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(*said.Load()); n > maxSaid {
		t.Fatalf("%d tools' reasons kept, more than %d", n, maxSaid)
	}
}
