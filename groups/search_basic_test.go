package groups_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
)

// basicFixture registers two tools without groups (one pinned), one that
// names basic, and one in the meta group ops, under cfg.
func basicFixture(t *testing.T, cfg groups.Config) (*registry.Registry, *groups.Store) {
	t.Helper()
	st := newStore(t)
	s := start(t, st, cfg)
	put(t, s, meta("ops", "Deploy and roll back."))
	r := registry.New(st, registry.Config{})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	obj := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)
	defs := []bus.ToolDef{
		{Name: "get_weather", Description: "Current weather in a city.", InputSchema: obj},
		{Name: "get_current_time", Description: "The time now.", InputSchema: obj},
		{Name: "echo", Description: "Echo the input.", InputSchema: obj, Groups: []string{bus.GroupBasic}},
		{Name: "deploy", Description: "Deploy a service.", InputSchema: obj, Groups: []string{"ops"}},
	}
	if ack, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w", Tools: defs}); err != nil || len(ack.Rejected) != 0 {
		t.Fatalf("register: %+v %v", ack, err)
	}
	return r, s
}

// TestSearchHidesGroupless: with search on, basic is switched like a meta
// group and off in a new session, so the model sees only the pinned tools,
// reset_tools and search_tools (docs/protocol.md 4.2); without search,
// tools without groups stay visible as before.
func TestSearchHidesGroupless(t *testing.T) {
	pins := groups.Pins{Tools: []string{"get_current_time"}}
	for _, tc := range []struct {
		name  string
		cfg   groups.Config
		want  []string
		basic bool // basic's activation in the listing's groups
	}{
		{"search off", groups.Config{Pinned: pins}, []string{"get_weather", "get_current_time", "echo", groups.ResetTools}, true},
		{"search on", groups.Config{Search: true, Pinned: pins}, []string{"get_current_time", groups.ResetTools, groups.SearchTools}, false},
		{"search on, basic pinned", groups.Config{Search: true, Pinned: groups.Pins{Tools: pins.Tools, Groups: []string{bus.GroupBasic}}},
			[]string{"get_weather", "get_current_time", "echo", groups.ResetTools, groups.SearchTools}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, s := basicFixture(t, tc.cfg)
			view := s.View(r, s.Refresh(t.Context(), "s1"), nil)
			if got := toolNames(view.Tools()); !slices.Equal(got, tc.want) {
				t.Fatalf("listing %v, want %v", got, tc.want)
			}
			scope := bus.ScopeBasic
			if tc.cfg.Search {
				scope = bus.ScopeMeta
			}
			if g := view.Groups()[0]; g.Name != bus.GroupBasic || g.Active != tc.basic || g.Scope != scope {
				t.Fatalf("basic in the listing: %+v", g)
			}
		})
	}
	r, s := basicFixture(t, groups.Config{Search: true, Pinned: pins})
	view := s.View(r, s.Refresh(t.Context(), "s1"), nil)
	got := view.Resolve("get_weather")
	if got.Code != bus.CodeInactiveTool || !strings.Contains(got.Message, "in group 'basic'") {
		t.Fatalf("a hidden groupless tool: %+v", got)
	}
	var schema struct {
		Properties map[string]any `json:"properties"`
	}
	for _, d := range view.Tools() {
		if d.Name == groups.ResetTools {
			_ = json.Unmarshal(d.InputSchema, &schema)
		}
	}
	if _, ok := schema.Properties[bus.GroupBasic]; !ok {
		t.Fatalf("reset_tools has no basic switch: %v", schema.Properties)
	}
	// Deferred: the groupless tools under basic, ops' under ops.
	ns, of := view.Deferred()
	if len(ns) != 2 || ns[0].Name != bus.GroupBasic || of["get_weather"] != bus.GroupBasic || of["echo"] != bus.GroupBasic || of["deploy"] != "ops" {
		t.Fatalf("deferred %+v %v", ns, of)
	}
	// search_tools finds a groupless tool and activates basic.
	text, err := view.Search(t.Context(), "s1", json.RawMessage(`{"query":"weather","limit":1,"activate":true}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "tool get_weather (group: basic; inactive)") || !strings.HasSuffix(text, "The currently activated tool group(s): basic.") {
		t.Fatalf("search text:\n%s", text)
	}
	view = s.View(r, s.Refresh(t.Context(), "s1"), nil)
	if got := toolNames(view.Tools()); !slices.Equal(got, []string{"get_weather", "get_current_time", "echo", groups.ResetTools, groups.SearchTools}) {
		t.Fatalf("after activating basic: %v", got)
	}
	// reset_tools' final set switches basic off again.
	if text, err := s.Reset(t.Context(), "s1", json.RawMessage(`{"ops":true}`)); err != nil || text != "The currently activated tool group(s): ops." {
		t.Fatalf("reset: %q %v", text, err)
	}
	view = s.View(r, s.Refresh(t.Context(), "s1"), nil)
	if got := toolNames(view.Tools()); !slices.Equal(got, []string{"get_current_time", "deploy", groups.ResetTools, groups.SearchTools}) {
		t.Fatalf("after reset to ops: %v", got)
	}
}

// TestResetTextNamesPinned: the texts of reset_tools and search_tools never
// say every group is off while a pinned one is on.
func TestResetTextNamesPinned(t *testing.T) {
	for _, tc := range []struct {
		name, input, want string
		pinned            []string
	}{
		{"none on, basic pinned", `{}`, "All tool groups are currently deactivated, except the pinned group(s), always active: basic.", []string{bus.GroupBasic}},
		{"none on, nothing pinned", `{}`, "All tool groups are currently deactivated.", nil},
		{"ops on, basic pinned", `{"ops":true}`, "The currently activated tool group(s): ops. The pinned group(s) stay active: basic.", []string{bus.GroupBasic}},
		{"ops on and pinned", `{"ops":true}`, "The currently activated tool group(s): ops.", []string{"ops"}},
		{"an unknown pin is not named", `{}`, "All tool groups are currently deactivated.", []string{"nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := basicFixture(t, groups.Config{Search: true, Pinned: groups.Pins{Groups: tc.pinned}})
			if text, err := s.Reset(t.Context(), "s1", json.RawMessage(tc.input)); err != nil || text != tc.want {
				t.Fatalf("reset %s: %q %v, want %q", tc.input, text, err, tc.want)
			}
		})
	}
}
