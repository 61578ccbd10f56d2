package registry

import (
	"fmt"

	"github.com/toolbus/toolbus/bus"
)

// Shared is protocol 1.11's one registration subject P.register for Register;
// since 1.12 each tool has its own (docs/protocol.md 7.1).
const Shared = ""

// Confine keeps of reg what may travel on P.register.<tool>: tool's
// definition and calls in flight. Every other definition and every group is
// rejected: that subject's publishers may define tool only (docs/security.md).
func Confine(tool string, reg bus.Register) (bus.Register, []bus.Rejection) {
	var rejected []bus.Rejection
	out := reg
	out.Tools, out.Groups, out.Refused = nil, nil, nil
	for _, d := range reg.Tools {
		if d.Name == tool {
			out.Tools = append(out.Tools, d)
			continue
		}
		rejected = append(rejected, bus.Rejection{Name: d.Name, Reason: fmt.Sprintf(
			"came on the registration subject of %q: a tool is defined only on its own, P.register.%s (docs/protocol.md 7.1)", tool, d.Name)})
	}
	for _, r := range reg.Refused {
		if r.Name == tool {
			out.Refused = append(out.Refused, r)
			continue
		}
		rejected = append(rejected, bus.Rejection{Name: r.Name, Reason: fmt.Sprintf(
			"came on the registration subject of %q: a tool is defined only on its own (docs/protocol.md 7.1); and: %s", tool, r.Reason)})
	}
	for _, g := range reg.Groups {
		rejected = append(rejected, bus.Rejection{Name: g.Name, Reason: fmt.Sprintf(
			"came on the registration subject of tool %q: a group is defined only on its own, P.register.group.%s (docs/protocol.md 7.1)", tool, g.Name)})
	}
	if reg.InFlight != nil {
		out.InFlight = map[string][]string{}
		if keys, ok := reg.InFlight[tool]; ok {
			out.InFlight[tool] = keys
		}
	}
	return out, rejected
}

// ConfineGroup is Confine for P.register.group.<group>: its definition only.
func ConfineGroup(group string, reg bus.Register) ([]bus.Group, []bus.Rejection) {
	var (
		keep     []bus.Group
		rejected []bus.Rejection
	)
	for _, g := range reg.Groups {
		if g.Name == group {
			keep = append(keep, g)
			continue
		}
		rejected = append(rejected, bus.Rejection{Name: g.Name, Reason: fmt.Sprintf(
			"came on the registration subject of group %q: a group is defined only on its own, P.register.group.%s (docs/protocol.md 7.1)", group, g.Name)})
	}
	for _, d := range reg.Tools {
		rejected = append(rejected, bus.Rejection{Name: d.Name, Reason: fmt.Sprintf(
			"came on the registration subject of group %q: a tool is defined only on its own, P.register.%s (docs/protocol.md 7.1)", group, d.Name)})
	}
	return keep, append(rejected, reg.Refused...)
}
