package groups

import (
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

// Deferred returns, for a listing with deferred tools (docs/protocol.md
// 4.1), each inactive meta group the model could activate with its tools
// that are not visible now, in registration order: the tools search_tools
// could activate (reach), each under the first of its meta groups. Tools of
// external-scope groups that are inactive, of undefined groups, without a
// live worker, or hidden by the request are never deferred. It also
// returns each deferred tool's group by name.
func (v *View) Deferred() ([]schemas.Namespace, map[string]string) {
	var order []bus.Group
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
	for _, g := range v.store.allGroups() {
		if g.Scope == bus.ScopeMeta && len(byGroup[g.Name]) > 0 {
			order = append(order, g)
		}
	}
	out := make([]schemas.Namespace, 0, len(order))
	for _, g := range order {
		out = append(out, schemas.Namespace{Name: g.Name, Description: g.Description, Tools: byGroup[g.Name]})
	}
	return out, of
}
