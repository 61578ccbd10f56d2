package conformance

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestListingMergeModesEveryFormat: for each merge mode and each format,
// the list order of docs/protocol.md 4.1 (basic and active groups' tools in
// registration order, reset_tools, then the request's external tools, a
// request tool replacing the backend tool of its name), each entry in the
// format's shape, and the groups entries.
func TestListingMergeModesEveryFormat(t *testing.T) {
	s := start(t)
	groups := []M{
		{"name": "ops", "description": "Operations.", "scope": "meta"},
		{"name": "live", "description": "On by default.", "scope": "meta", "active_by_default": true},
		{"name": "x", "description": "Operator group.", "scope": "external"},
	}
	s.startWorker(t, []M{def("alpha"), def("beta"), def("opstool", M{"groups": []string{"ops"}}),
		def("livetool", M{"groups": []string{"live"}}), def("xtool", M{"groups": []string{"x"}})}, groups, echo)
	s.waitListed(t, "probe", "alpha", "beta", "livetool", "reset_tools")
	s.adminOK(t, "session.activate", "s1", M{"groups": []string{"x"}, "active": true})

	ext := []M{extTool("pick_file", "Pick a file.", M{"dir": M{"type": "string"}}), extTool("beta", "Caller's beta.", M{})}
	modes := []struct {
		name string
		req  M
		want []string
	}{
		{"absent", M{"external_tools": ext}, []string{"alpha", "livetool", "xtool", "reset_tools", "pick_file", "beta"}},
		{"merge_external_priority", M{"merge_mode": "merge_external_priority", "external_tools": ext},
			[]string{"alpha", "livetool", "xtool", "reset_tools", "pick_file", "beta"}},
		{"external_only", M{"merge_mode": "external_only", "external_tools": ext}, []string{"pick_file", "beta"}},
		{"agent_only", M{"merge_mode": "agent_only"}, []string{"alpha", "beta", "livetool", "xtool", "reset_tools"}},
		{"no request", nil, []string{"alpha", "beta", "livetool", "xtool", "reset_tools"}},
	}
	formatKeys := map[string][]string{
		"openai":           {"type", "function"},
		"openai-responses": {"type", "name", "description", "parameters", "strict"},
		"anthropic":        {"name", "description", "input_schema"},
		"gemini":           {"name", "description", "parametersJsonSchema"},
		"mcp":              {"name", "description", "inputSchema", "annotations"},
	}
	wantGroups := []GroupInfo{{Name: "ops", Description: "Operations.", Scope: "meta"},
		{Name: "live", Description: "On by default.", Scope: "meta", Active: true},
		{Name: "x", Description: "Operator group.", Scope: "external", Active: true}}
	for _, m := range modes {
		for _, format := range []string{"toolbus", "openai", "openai-responses", "anthropic", "gemini", "mcp"} {
			t.Run(m.name+"/"+format, func(t *testing.T) {
				q := M{"format": format}
				if m.req != nil {
					q["request"] = m.req
				}
				l := s.list(t, "s1", q)
				if got := names(t, l.Tools); !slices.Equal(got, m.want) {
					t.Fatalf("tools %v, want %v", got, m.want)
				}
				for i, raw := range l.Tools {
					if keys, ok := formatKeys[format]; ok {
						if format == "mcp" && strings.Contains(string(raw), `"_meta":{"io.modelcontextprotocol/groups":`) {
							// A grouped tool's groups (protocol 4.1, 1.4).
							keys = append(slices.Clip(keys), "_meta")
						}
						wantKeys(t, format+" "+m.want[i], raw, keys...)
					} else {
						hasKeys(t, "toolbus "+m.want[i], raw, "name", "description", "input_schema")
					}
				}
				if m.want[len(m.want)-1] == "beta" {
					desc := member(t, l.Tools[len(l.Tools)-1], "description")
					if format == "openai" {
						desc = member(t, member(t, l.Tools[len(l.Tools)-1], "function"), "description")
					}
					if string(desc) != `"Caller's beta."` {
						t.Errorf("beta is the backend tool: %s", l.Tools[len(l.Tools)-1])
					}
				}
				if len(l.Groups) != 4 || l.Groups[0].Name != "basic" || l.Groups[0].Scope != "basic" || !l.Groups[0].Active ||
					!slices.Equal(l.Groups[1:], wantGroups) {
					t.Errorf("groups %+v, want basic then %+v", l.Groups, wantGroups)
				}
			})
		}
	}
	// Another session has no external group active and the default groups.
	if got := names(t, s.list(t, "s2", nil).Tools); !slices.Equal(got, []string{"alpha", "beta", "livetool", "reset_tools"}) {
		t.Errorf("s2 tools %v", got)
	}
	// After reset_tools activates ops (and so deactivates live), the list follows.
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "reset_tools", Input: M{"ops": true}}))
	wantSuccess(t, r.Results[0], "The currently activated tool group(s): ops.")
	l := s.list(t, "s1", M{"format": "mcp", "request": M{"external_tools": ext[:1]}})
	if got := names(t, l.Tools); !slices.Equal(got, []string{"alpha", "beta", "opstool", "xtool", "reset_tools", "pick_file"}) {
		t.Errorf("after reset_tools: tools %v", got)
	}
	var act []bool
	for _, g := range l.Groups {
		act = append(act, g.Active)
	}
	if !slices.Equal(act, []bool{true, true, false, true}) {
		t.Errorf("after reset_tools: groups %+v", l.Groups)
	}
	var ann struct {
		Annotations json.RawMessage `json:"annotations"`
	}
	_ = json.Unmarshal(l.Tools[len(l.Tools)-1], &ann)
	wantKeys(t, "mcp annotations of a request tool", ann.Annotations, "readOnlyHint", "destructiveHint", "idempotentHint")
}
