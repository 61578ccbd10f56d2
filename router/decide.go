package router

import (
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/permission"
)

// parkSpec says how a call parks; the zero value means it runs.
type parkSpec struct {
	kind          string
	requestScoped bool
	reason        string // why it asks
	rule          string // why the engine decided as it did: the audit record's rule
	suggested     []bus.Rule
}

// decide applies the permission engine to a resolved, validated call. It
// returns a result for a denied call, a parkSpec for a call that waits (a
// confirmation, or an external tool), or neither for a call that runs now.
// reset_tools, the skill loader and request-scoped external tools are
// never asked about.
func decide(pc permission.Context, t groups.Resolved, c bus.Call, input json.RawMessage) (parkSpec, *bus.Result) {
	switch {
	case t.Reset, t.Skill, t.Search, t.Read:
		return parkSpec{}, nil
	case t.External != nil:
		return parkSpec{kind: bus.KindExternal, requestScoped: true}, nil
	}
	def := &t.Tool.Def
	d := permission.Decide(pc, def, input)
	switch d.Behavior {
	case permission.Deny:
		return parkSpec{rule: d.Reason}, ptr(bus.ErrorResult(c, bus.CodeDenied,
			fmt.Sprintf("PermissionDeniedError: The tool '%s' may not run: %s.", def.Name, d.Reason)))
	case permission.Ask:
		return parkSpec{kind: bus.KindConfirm, reason: d.Reason, rule: d.Reason, suggested: d.SuggestedRules}, nil
	}
	if def.External {
		return parkSpec{kind: bus.KindExternal, rule: d.Reason}, nil
	}
	return parkSpec{rule: d.Reason}, nil
}

func permissionContext(s *groups.Session) permission.Context {
	return permission.Context{Mode: s.Mode, Rules: s.Rules, WorkDirs: s.WorkDirs}
}
