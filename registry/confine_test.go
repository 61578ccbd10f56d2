package registry_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
)

// TestConfine pins what a registration on a tool's subject keeps
// (docs/protocol.md 7.1, 1.12): that tool's definition and calls in flight,
// nothing of another tool or of a group.
func TestConfine(t *testing.T) {
	greet, deploy := def("greet"), def("deploy")
	ops := bus.Group{Name: "ops"}
	for _, tc := range []struct {
		name      string
		reg       bus.Register
		tools     []string // kept definitions
		rejected  []string // names rejected
		inflight  map[string][]string
		noReports bool // InFlight stays nil
	}{
		{"its own definition", bus.Register{Tools: []bus.ToolDef{greet}}, []string{"greet"}, nil, nil, true},
		{"another tool's", bus.Register{Tools: []bus.ToolDef{deploy}}, nil, []string{"deploy"}, nil, true},
		{"both", bus.Register{Tools: []bus.ToolDef{deploy, greet}}, []string{"greet"}, []string{"deploy"}, nil, true},
		{"its own twice", bus.Register{Tools: []bus.ToolDef{greet, greet}}, []string{"greet", "greet"}, nil, nil, true}, // Register rejects the second
		{"a group", bus.Register{Groups: []bus.Group{ops}, Tools: []bus.ToolDef{greet}}, []string{"greet"}, []string{"ops"}, nil, true},
		{"a group named as the tool", bus.Register{Groups: []bus.Group{{Name: "greet"}}}, nil, []string{"greet"}, nil, true},
		{"undecodable, its own", bus.Register{Refused: []bus.Rejection{{Name: "greet", Reason: "input_schema is missing"}}}, nil, []string{"greet"}, nil, true},
		{"undecodable, another's", bus.Register{Refused: []bus.Rejection{{Name: "tools[0]", Reason: "x"}}}, nil, []string{"tools[0]"}, nil, true},
		{"in flight, own and another's", bus.Register{Tools: []bus.ToolDef{greet}, InFlight: map[string][]string{"greet": {"a.b.c"}, "deploy": {"d.e.f"}}},
			[]string{"greet"}, nil, map[string][]string{"greet": {"a.b.c"}}, false},
		{"in flight, another's only", bus.Register{Tools: []bus.ToolDef{greet}, InFlight: map[string][]string{"deploy": {"d.e.f"}}},
			[]string{"greet"}, nil, map[string][]string{}, false},
		{"a leave", bus.Register{Leaving: true}, nil, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, rejected := registry.Confine("greet", tc.reg)
			var tools, names []string
			for _, d := range out.Tools {
				tools = append(tools, d.Name)
			}
			for _, r := range out.Refused {
				names = append(names, r.Name)
			}
			for _, r := range rejected {
				names = append(names, r.Name)
			}
			if !slices.Equal(tools, tc.tools) || !slices.Equal(names, tc.rejected) {
				t.Fatalf("kept %v, rejected %v; want %v, %v", tools, names, tc.tools, tc.rejected)
			}
			if len(out.Groups) != 0 {
				t.Fatalf("kept groups %v", out.Groups)
			}
			if (out.InFlight == nil) != tc.noReports || fmt.Sprint(out.InFlight) != fmt.Sprint(tc.inflight) && !tc.noReports {
				t.Fatalf("in flight %v, want %v", out.InFlight, tc.inflight)
			}
			if out.Leaving != tc.reg.Leaving {
				t.Fatal("Leaving changed")
			}
		})
	}
}

// TestConfineGroup pins what a registration on a group's subject keeps:
// that group only.
func TestConfineGroup(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reg      bus.Register
		kept     []string
		rejected []string
	}{
		{"its own", bus.Register{Groups: []bus.Group{{Name: "ops"}}}, []string{"ops"}, nil},
		{"another", bus.Register{Groups: []bus.Group{{Name: "fs"}}}, nil, []string{"fs"}},
		{"a tool named as the group", bus.Register{Tools: []bus.ToolDef{def("ops")}}, nil, []string{"ops"}},
		{"both and more", bus.Register{Groups: []bus.Group{{Name: "fs"}, {Name: "ops"}}, Tools: []bus.ToolDef{def("greet")}}, []string{"ops"}, []string{"fs", "greet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, rejected := registry.ConfineGroup("ops", tc.reg)
			var k, r []string
			for _, g := range kept {
				k = append(k, g.Name)
			}
			for _, x := range rejected {
				r = append(r, x.Name)
			}
			if !slices.Equal(k, tc.kept) || !slices.Equal(r, tc.rejected) {
				t.Fatalf("kept %v, rejected %v; want %v, %v", k, r, tc.kept, tc.rejected)
			}
		})
	}
}
