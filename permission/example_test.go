package permission_test

import (
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
)

func ExampleDecide() {
	shell := &bus.ToolDef{Name: "Bash", Permission: bus.PermissionPassthrough,
		RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	pc := permission.Context{
		Mode:  permission.Default,
		Rules: []bus.Rule{{Tool: "Bash", Pattern: "git:*", Behavior: permission.Allow}},
	}
	for _, cmd := range []string{"git status", "git status && npm publish"} {
		input, _ := json.Marshal(map[string]string{"command": cmd})
		d := permission.Decide(pc, shell, input)
		fmt.Printf("%s: %s (%s) %v\n", cmd, d.Behavior, d.Reason, d.SuggestedRules)
	}
	// Output:
	// git status: allow (rule Bash(git:*) allows it) []
	// git status && npm publish: ask (no rule allows this call of Bash) [{Bash npm:* allow}]
}
