package groups_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

const instructionsIntro = "The tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups."

// resetFixture defines meta groups web (with instructions) and db, and the
// external group ops, in that order.
func resetFixture(t *testing.T) (*store.Store, *groups.Store) {
	t.Helper()
	st := newStore(t)
	s := start(t, st, groups.Config{})
	put(t, s,
		bus.Group{Name: "web", Description: "Search the web.", Instructions: "Cite your sources.", Scope: bus.ScopeMeta},
		bus.Group{Name: "db", Description: "Query databases.", Scope: bus.ScopeMeta},
		bus.Group{Name: "ops", Description: "Operations.", Scope: bus.ScopeExternal})
	return st, s
}

func TestReset(t *testing.T) {
	withWeb := "The currently activated tool group(s): web.\n<tool-instructions>\n" + instructionsIntro +
		"\n<group name=\"web\">Cite your sources.</group>\n</tool-instructions>"
	for _, tc := range []struct {
		name   string
		input  string
		text   string   // success text, "" when it fails
		err    string   // failure text
		active []string // the session's groups afterwards (it starts with ops and db)
	}{
		{"none", `{}`, "All tool groups are currently deactivated.", "", []string{"ops"}},
		{"all false", `{"web":false,"db":false}`, "All tool groups are currently deactivated.", "", []string{"ops"}},
		{"one without instructions", `{"db":true}`, "The currently activated tool group(s): db.", "", []string{"ops", "db"}},
		{"one with instructions", `{"web":true}`, withWeb, "", []string{"ops", "web"}},
		{"names in registration order", `{"db":true,"web":true}`,
			"The currently activated tool group(s): web, db.\n<tool-instructions>\n" + instructionsIntro +
				"\n<group name=\"web\">Cite your sources.</group>\n</tool-instructions>", "", []string{"ops", "db", "web"}},
		{"mixed", `{"web":true,"db":false}`, withWeb, "", []string{"ops", "web"}},
		{"unknown group", `{"nope":true}`, "", "Invalid group name(s): nope. The current available groups are: web, db", nil},
		{"basic and external groups are not meta", `{"web":true,"basic":true,"ops":false,"zz":true}`, "",
			"Invalid group name(s): basic, ops, zz. The current available groups are: web, db", nil},
		{"string", `{"web":"yes"}`, "", "Invalid arguments: the argument 'web' should be a bool value, but got string.", nil},
		{"number", `{"db":1}`, "", "Invalid arguments: the argument 'db' should be a bool value, but got number.", nil},
		{"object", `{"web":true,"db":{}}`, "", "Invalid arguments: the argument 'db' should be a bool value, but got object.", nil},
		{"array", `{"db":[true]}`, "", "Invalid arguments: the argument 'db' should be a bool value, but got array.", nil},
		{"null", `{"web":null}`, "", "Invalid arguments: the argument 'web' should be a bool value, but got null.", nil},
		{"not an object", `[true]`, "", "", nil},
		{"not JSON", `{"web":`, "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, s := resetFixture(t)
			before, err := s.Update(t.Context(), "s1", func(sess *groups.Session) error {
				sess.Active = []string{"ops", "db"}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			text, err := s.Reset(t.Context(), "s1", json.RawMessage(tc.input))
			if tc.text != "" {
				if err != nil || text != tc.text {
					t.Fatalf("Reset = %q, %v\nwant %q", text, err, tc.text)
				}
				if got := s.Session("s1").Active; !slices.Equal(got, tc.active) {
					t.Fatalf("active %v, want %v", got, tc.active)
				}
				return
			}
			var be *bus.Error
			if !errors.As(err, &be) || be.Code != bus.CodeInvalidInput || be.Message == "" || text != "" {
				t.Fatalf("Reset = %q, %v; want an invalid_input error", text, err)
			}
			if tc.err != "" && be.Message != tc.err {
				t.Fatalf("message %q\nwant %q", be.Message, tc.err)
			}
			if !strings.HasPrefix(be.Message, "Invalid ") {
				t.Errorf("message %q does not start with \"Invalid \"", be.Message)
			}
			// A failed reset changes nothing.
			e, err := st.Sessions.Get(t.Context(), "s1")
			if err != nil || e.Revision() != before.Revision() {
				t.Fatalf("a failed reset wrote the session: %v", err)
			}
			if got := s.Session("s1").Active; !slices.Equal(got, []string{"ops", "db"}) {
				t.Fatalf("active %v after a failed reset", got)
			}
		})
	}
}

func TestResetNewSession(t *testing.T) {
	_, s := resetFixture(t)
	if s.Stored("fresh") {
		t.Fatal("stored before reset")
	}
	text, err := s.Reset(t.Context(), "fresh", json.RawMessage(`{"db":true}`))
	if err != nil || text != "The currently activated tool group(s): db." {
		t.Fatalf("Reset = %q, %v", text, err)
	}
	if !s.Stored("fresh") || !slices.Equal(s.Session("fresh").Active, []string{"db"}) {
		t.Fatalf("session %+v", s.Session("fresh"))
	}
	// A failed reset of a session that does not exist does not create it.
	if _, err := s.Reset(t.Context(), "fresh2", json.RawMessage(`{"nope":true}`)); err == nil {
		t.Fatal("invalid reset accepted")
	}
	if s.Stored("fresh2") {
		t.Fatal("a failed reset stored the session")
	}
}

// viewFixture is a registry and a groups store with tools in several
// groups. Groups: web (meta), db (meta), ops (external), in that order.
// Tools, in registration order: plain (basic), search (web), query (db),
// both (db, web), offline (web, its worker left), ext (external, basic),
// ghost (an undefined group), explicit (basic named).
func viewFixture(t *testing.T) (*registry.Registry, *groups.Store) {
	t.Helper()
	_, r, s := viewFixtureStore(t)
	return r, s
}

// viewFixtureStore is viewFixture that also returns the buckets.
func viewFixtureStore(t *testing.T) (*store.Store, *registry.Registry, *groups.Store) {
	t.Helper()
	st := newStore(t)
	s := start(t, st, groups.Config{})
	put(t, s,
		bus.Group{Name: "web", Description: "Search the web.", Instructions: "Cite your sources.", Scope: bus.ScopeMeta},
		bus.Group{Name: "db", Description: "Query databases.", Scope: bus.ScopeMeta},
		bus.Group{Name: "ops", Description: "Operations.", Scope: bus.ScopeExternal})
	r := registry.New(st, registry.Config{})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	def := func(name string, groups ...string) bus.ToolDef {
		return bus.ToolDef{Name: name, Description: "Tool " + name + ".", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`), Groups: groups}
	}
	ext := def("ext")
	ext.External = true
	for _, reg := range []bus.Register{
		{Worker: "w1", Tools: []bus.ToolDef{def("plain"), def("search", "web"), def("query", "db"), def("both", "db", "web")}},
		{Worker: "w2", Tools: []bus.ToolDef{def("offline", "web")}},
		{Worker: "w1", Tools: []bus.ToolDef{ext, def("ghost", "ghost"), def("explicit", "basic")}},
		{Worker: "w2", Leaving: true},
	} {
		ack, err := r.Register(t.Context(), registry.Shared, "", reg)
		if err != nil || len(ack.Rejected) != 0 {
			t.Fatalf("register: %+v %v", ack, err)
		}
	}
	// The watch may show w2 live for a moment after it left (see the
	// registry's TestLeavingIsImmediate); wait until it caught up.
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if tool, _ := r.Lookup("offline"); r.Live(tool) {
			return errors.New("offline still live")
		}
		return nil
	})
	return st, r, s
}

func inactiveText(tool, group string) string {
	return "ToolGroupInactiveError: The tool '" + tool + "' in group '" + group +
		"' is currently inactive. You should first activate the group by calling the 'reset_tools' tool."
}

func notFoundText(tool string) string {
	return "ToolNotFoundError: The tool named '" + tool + "' doesn't exist."
}

func checkRequest(t *testing.T, r *bus.Request) *groups.Request {
	t.Helper()
	req, err := groups.CheckRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func externalTool(name string) bus.ExternalTool {
	return bus.ExternalTool{Name: name, Description: "Caller tool " + name + ".", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)}
}

func TestResolve(t *testing.T) {
	reg, s := viewFixture(t)
	webActive := &groups.Session{Active: []string{"web"}}
	noneActive := &groups.Session{Active: []string{}}
	ghostActive := &groups.Session{Active: []string{"ghost"}}
	priority := checkRequest(t, &bus.Request{ExternalTools: []bus.ExternalTool{externalTool("query"), externalTool("search"), externalTool("pick_file")}})
	only := checkRequest(t, &bus.Request{MergeMode: bus.MergeExternalOnly, ExternalTools: []bus.ExternalTool{externalTool("pick_file")}})
	agent := checkRequest(t, &bus.Request{MergeMode: bus.MergeAgentOnly})
	for _, tc := range []struct {
		name string
		sess *groups.Session
		req  *groups.Request
		call string
		want string // "tool", "external", "reset", or an error code
		text string // the error text, when fixed
	}{
		{"basic tool", webActive, nil, "plain", "tool", ""},
		{"named basic", noneActive, nil, "explicit", "tool", ""},
		{"active group", webActive, nil, "search", "tool", ""},
		{"inactive group", webActive, nil, "query", bus.CodeInactiveTool, inactiveText("query", "db")},
		{"two groups, one active", webActive, nil, "both", "tool", ""},
		{"two groups, none active: first in registration order", noneActive, nil, "both", bus.CodeInactiveTool, inactiveText("both", "web")},
		{"undefined group is never active", ghostActive, nil, "ghost", bus.CodeInactiveTool, inactiveText("ghost", "ghost")},
		{"unknown", webActive, nil, "nope", bus.CodeUnknownTool, notFoundText("nope")},
		{"unavailable", webActive, nil, "offline", bus.CodeUnavailable, ""},
		{"registered external needs no worker", noneActive, nil, "ext", "tool", ""},
		{"reset_tools", noneActive, nil, groups.ResetTools, "reset", ""},
		{"request external beats backend", webActive, priority, "search", "external", ""},
		{"request external beats an inactive backend", webActive, priority, "query", "external", ""},
		{"request external", webActive, priority, "pick_file", "external", ""},
		{"backend next to request externals", webActive, priority, "plain", "tool", ""},
		{"external_only hides backend", webActive, only, "plain", bus.CodeUnknownTool, notFoundText("plain")},
		{"external_only hides reset_tools", webActive, only, groups.ResetTools, bus.CodeUnknownTool, notFoundText(groups.ResetTools)},
		{"external_only hides inactive", webActive, only, "query", bus.CodeUnknownTool, notFoundText("query")},
		{"external_only keeps request tools", webActive, only, "pick_file", "external", ""},
		{"agent_only", webActive, agent, "search", "tool", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.View(reg, tc.sess, tc.req).Resolve(tc.call)
			got := r.Code
			switch {
			case r.Code != "":
				if r.Tool != nil || r.External != nil || r.Reset {
					t.Fatalf("error %s with a target: %+v", r.Code, r)
				}
				if r.Message == "" {
					t.Fatalf("error %s without a message", r.Code)
				}
			case r.Tool != nil && r.External == nil && !r.Reset:
				got = "tool"
				if r.Tool.Def.Name != tc.call {
					t.Fatalf("resolved to %s", r.Tool.Def.Name)
				}
			case r.External != nil && r.Tool == nil && !r.Reset:
				got = "external"
				if r.External.Def.Name != tc.call || !r.External.Def.External || r.External.Def.Description != "Caller tool "+tc.call+"." {
					t.Fatalf("resolved to %+v", r.External.Def)
				}
			case r.Reset && r.Tool == nil && r.External == nil:
				got = "reset"
			default:
				t.Fatalf("not exactly one target: %+v", r)
			}
			if got != tc.want {
				t.Fatalf("Resolve(%s) = %s (%s), want %s", tc.call, got, r.Message, tc.want)
			}
			if tc.text != "" && r.Message != tc.text {
				t.Fatalf("message %q\nwant %q", r.Message, tc.text)
			}
			if tc.want == bus.CodeUnavailable && !strings.Contains(r.Message, "'"+tc.call+"'") {
				t.Errorf("unavailable message %q does not name the tool", r.Message)
			}
		})
	}
}

func toolNames(defs []bus.ToolDef) []string {
	var out []string
	for _, d := range defs {
		out = append(out, d.Name)
	}
	return out
}

func TestViewTools(t *testing.T) {
	reg, s := viewFixture(t)
	webActive := &groups.Session{Active: []string{"web"}}
	for _, tc := range []struct {
		name string
		sess *groups.Session
		req  *bus.Request
		want []string
	}{
		{"web active", webActive, nil, []string{"plain", "search", "both", "ext", "explicit", "reset_tools"}},
		{"nothing active", &groups.Session{}, nil, []string{"plain", "ext", "explicit", "reset_tools"}},
		{"all active", &groups.Session{Active: []string{"web", "db", "ghost"}}, nil, []string{"plain", "search", "query", "both", "ext", "explicit", "reset_tools"}},
		{"request tools replace backend ones and come last", webActive,
			&bus.Request{ExternalTools: []bus.ExternalTool{externalTool("search"), externalTool("pick_file"), externalTool("query")}},
			[]string{"plain", "both", "ext", "explicit", "reset_tools", "search", "pick_file", "query"}},
		{"external_only", webActive,
			&bus.Request{MergeMode: bus.MergeExternalOnly, ExternalTools: []bus.ExternalTool{externalTool("pick_file"), externalTool("plain")}},
			[]string{"pick_file", "plain"}},
		{"external_only without tools", webActive, &bus.Request{MergeMode: bus.MergeExternalOnly}, nil},
		{"agent_only", webActive, &bus.Request{MergeMode: bus.MergeAgentOnly}, []string{"plain", "search", "both", "ext", "explicit", "reset_tools"}},
		{"request tool named reset_tools", webActive, &bus.Request{ExternalTools: []bus.ExternalTool{externalTool("reset_tools")}},
			[]string{"plain", "search", "both", "ext", "explicit", "reset_tools"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := s.View(reg, tc.sess, checkRequest(t, tc.req))
			defs := v.Tools()
			if got := toolNames(defs); !slices.Equal(got, tc.want) {
				t.Fatalf("Tools %v\nwant  %v", got, tc.want)
			}
			if v.Session() != tc.sess {
				t.Error("Session() is not the view's session")
			}
			if tc.req != nil {
				for _, d := range defs[len(defs)-len(tc.req.ExternalTools):] {
					if !d.External || d.Description != "Caller tool "+d.Name+"." {
						t.Errorf("request tool %s listed as %+v", d.Name, d)
					}
				}
			}
		})
	}
}

func TestResetToolsDefinition(t *testing.T) {
	_, reg, s := viewFixtureStore(t)
	defs := s.View(reg, &groups.Session{}, nil).Tools()
	d := defs[len(defs)-1]
	if d.Name != groups.ResetTools || d.ConcurrencySafe || d.External || d.Description == "" {
		t.Fatalf("reset_tools %+v", d)
	}
	raw := string(d.InputSchema)
	want := `{"type":"object","properties":{"web":{"type":"boolean","default":false,"description":"Search the web."},` +
		`"db":{"type":"boolean","default":false,"description":"Query databases."}}}`
	if raw != want {
		t.Fatalf("schema %s\nwant   %s", raw, want)
	}
	// Without meta groups there is no reset_tools.
	for _, g := range []string{"web", "db"} {
		if err := s.Delete(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
	v := s.View(reg, &groups.Session{}, nil)
	if slices.Contains(toolNames(v.Tools()), groups.ResetTools) {
		t.Fatal("reset_tools listed without meta groups")
	}
	if r := v.Resolve(groups.ResetTools); r.Code != bus.CodeUnknownTool {
		t.Fatalf("Resolve(reset_tools) without meta groups: %+v", r)
	}
}

func TestViewGroups(t *testing.T) {
	reg, s := viewFixture(t)
	got := s.View(reg, &groups.Session{Active: []string{"ops", "db"}}, nil).Groups()
	want := []bus.GroupInfo{
		{Name: "basic", Description: "Tools that are always available.", Scope: bus.ScopeBasic, Active: true},
		{Name: "web", Description: "Search the web.", Scope: bus.ScopeMeta, Active: false},
		{Name: "db", Description: "Query databases.", Scope: bus.ScopeMeta, Active: true},
		{Name: "ops", Description: "Operations.", Scope: bus.ScopeExternal, Active: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Groups %+v\nwant   %+v", got, want)
	}
}

func TestCheckRequest(t *testing.T) {
	tool := externalTool("pick_file")
	for _, tc := range []struct {
		name     string
		req      *bus.Request
		mode     string
		external []string
		err      string // exact message, or a part of it after "~"
	}{
		{"nil", nil, bus.MergeExternalPriority, nil, ""},
		{"empty", &bus.Request{}, bus.MergeExternalPriority, nil, ""},
		{"priority", &bus.Request{MergeMode: bus.MergeExternalPriority, ExternalTools: []bus.ExternalTool{tool, externalTool("b")}}, bus.MergeExternalPriority, []string{"pick_file", "b"}, ""},
		{"external_only", &bus.Request{MergeMode: bus.MergeExternalOnly, ExternalTools: []bus.ExternalTool{tool}}, bus.MergeExternalOnly, []string{"pick_file"}, ""},
		{"agent_only", &bus.Request{MergeMode: bus.MergeAgentOnly}, bus.MergeAgentOnly, nil, ""},
		{"agent_only with tools", &bus.Request{MergeMode: bus.MergeAgentOnly, ExternalTools: []bus.ExternalTool{tool}}, "", nil, "agent_only cannot include external tools"},
		{"bad merge mode", &bus.Request{MergeMode: "mixed"}, "", nil, `~merge_mode "mixed"`},
		{"bad name", &bus.Request{ExternalTools: []bus.ExternalTool{externalTool("pick file")}}, "", nil, `~"pick file"`},
		{"duplicate", &bus.Request{ExternalTools: []bus.ExternalTool{tool, tool}}, "", nil, `~"pick_file" is listed twice`},
		{"schema not an object schema", &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "s", InputSchema: json.RawMessage(`{"type":"string"}`)}}}, "", nil, "~external tool s"},
		{"schema does not compile", &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "s", InputSchema: json.RawMessage(`{"type":"object","required":"x"}`)}}}, "", nil, "~external tool s"},
		{"schema with external $ref", &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "s", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"http://x/y.json"}}}`)}}}, "", nil, "~external"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := groups.CheckRequest(tc.req)
			if tc.err != "" {
				var be *bus.Error
				if !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
					t.Fatalf("err %v, want bad_request", err)
				}
				if part, ok := strings.CutPrefix(tc.err, "~"); ok {
					if !strings.Contains(be.Message, part) {
						t.Fatalf("message %q does not contain %q", be.Message, part)
					}
				} else if be.Message != tc.err {
					t.Fatalf("message %q, want exactly %q", be.Message, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.Mode != tc.mode {
				t.Fatalf("mode %q, want %q", req.Mode, tc.mode)
			}
			var got []string
			for _, rt := range req.External {
				got = append(got, rt.Def.Name)
				if !rt.Def.External || !rt.Def.ConcurrencySafe || rt.Schema == nil || string(rt.Def.InputSchema) != `{"type":"object","properties":{"x":{"type":"string"}}}` {
					t.Errorf("request tool %+v", rt.Def)
				}
			}
			if !slices.Equal(got, tc.external) {
				t.Fatalf("external tools %v, want %v", got, tc.external)
			}
		})
	}
}
