package groups_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
)

// searchFixture: meta groups weather and mail, the external group ops (not
// active), the pinned group core; tools in each, one without a live worker.
func searchFixture(t *testing.T, cfg groups.Config) (*registry.Registry, *groups.Store) {
	t.Helper()
	st := newStore(t)
	s := start(t, st, cfg)
	put(t, s,
		bus.Group{Name: "weather", Description: "Weather forecasts and observations.", Instructions: "Say which source.", Scope: bus.ScopeMeta},
		meta("mail", "Read and send e-mail."),
		bus.Group{Name: "ops", Description: "Server operations.", Scope: bus.ScopeExternal},
		meta("core", "Core tools."))
	r := registry.New(st, registry.Config{})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	def := func(name, desc, props string, groups ...string) bus.ToolDef {
		return bus.ToolDef{Name: name, Description: desc, InputSchema: json.RawMessage(`{"type":"object","properties":{` + props + `}}`), Groups: groups}
	}
	str := `{"type":"string"}`
	for _, reg := range []bus.Register{
		{Worker: "w1", Tools: []bus.ToolDef{
			def("get_weather", "Current conditions for a city.", `"city":`+str, "weather"),
			def("get_forecast", "Forecast for the next days.", `"city":`+str+`,"days":{"type":"integer"}`, "weather"),
			def("send_email", "Send an e-mail message.", `"to":`+str+`,"body":`+str, "mail"),
			def("restart_server", "Restart a server.", `"host":`+str, "ops"),
			def("whoami", "Who the user is.", ``, "core"),
			def("help_desk", "Open a ticket with the help desk.", ``, "mail"),
		}},
		{Worker: "w2", Tools: []bus.ToolDef{def("weather_radar", "Radar images of weather.", ``, "weather")}},
		{Worker: "w2", Leaving: true},
	} {
		if ack, err := r.Register(t.Context(), registry.Shared, "", reg); err != nil || len(ack.Rejected) != 0 {
			t.Fatalf("register: %+v %v", ack, err)
		}
	}
	waitNotLive(t, r, "weather_radar")
	return r, s
}

func waitNotLive(t *testing.T, r *registry.Registry, name string) {
	t.Helper()
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if tool, _ := r.Lookup(name); r.Live(tool) {
			return errors.New(name + " still live")
		}
		return nil
	})
}

var searchCfg = groups.Config{Search: true, Pinned: groups.Pins{Tools: []string{"help_desk"}, Groups: []string{"core"}}}

func runSearch(t *testing.T, r *registry.Registry, s *groups.Store, session, input string) (string, error) {
	t.Helper()
	return s.View(r, s.Refresh(t.Context(), session), nil).Search(t.Context(), session, json.RawMessage(input), nil)
}

func TestSearchRanking(t *testing.T) {
	r, s := searchFixture(t, searchCfg)
	for _, tc := range []struct {
		query string
		want  []string // the tools found, in order
	}{
		{"weather forecast", []string{"get_forecast", "get_weather"}},
		{"days", []string{"get_forecast"}},              // a schema property
		{"e-mail", []string{"send_email", "help_desk"}}, // a group description
		{"city", []string{"get_weather", "get_forecast"}},
		{"restart server", nil}, // ops is external and inactive: never found
		{"radar", nil},          // no live worker
		{"who", []string{"whoami"}},
	} {
		text, err := runSearch(t, r, s, "s1", fmt.Sprintf(`{"query":%q}`, tc.query))
		if err != nil {
			t.Fatalf("%q: %v", tc.query, err)
		}
		if got := foundNames(text); !slices.Equal(got, tc.want) {
			t.Errorf("%q found %v, want %v\n%s", tc.query, got, tc.want, text)
		}
	}
	text, _ := runSearch(t, r, s, "s1", `{"query":"weather","limit":1}`)
	if got := foundNames(text); !slices.Equal(got, []string{"get_weather"}) || !strings.Contains(text, "(group: weather; inactive)") ||
		!strings.Contains(text, `"activate": true`) {
		t.Errorf("limit 1:\n%s", text)
	}
}

// foundNames are the names in a search_tools text, in order.
func foundNames(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		var n int
		var kind, name string
		if _, err := fmt.Sscanf(line, "%d. %s %s", &n, &kind, &name); err == nil {
			out = append(out, name)
		}
	}
	return out
}

func TestSearchActivateIsReset(t *testing.T) {
	r, s := searchFixture(t, searchCfg)
	// s1 has mail active; a search for the weather activates weather and
	// keeps mail, as reset_tools with both would.
	if _, err := s.Reset(t.Context(), "s1", json.RawMessage(`{"mail":true}`)); err != nil {
		t.Fatal(err)
	}
	text, err := runSearch(t, r, s, "s1", `{"query":"forecast","activate":true}`)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Reset(t.Context(), "s2", json.RawMessage(`{"mail":true,"weather":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(text, want) {
		t.Fatalf("search text ends\n%s\nwant reset_tools' text\n%s", text, want)
	}
	a, b := s.Refresh(t.Context(), "s1").Active, s.Refresh(t.Context(), "s2").Active
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) || !slices.Equal(a, []string{"mail", "weather"}) {
		t.Fatalf("active after search %v, after reset %v", a, b)
	}
	view := s.View(r, s.Refresh(t.Context(), "s1"), nil)
	if got := view.Resolve("get_forecast"); got.Tool == nil {
		t.Fatalf("get_forecast after activation: %+v", got)
	}
	// Activation never touches external-scope groups, and a search
	// that finds only visible tools changes nothing.
	if _, err := s.Update(t.Context(), "s3", func(sess *groups.Session) error { sess.Active = []string{"ops"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := runSearch(t, r, s, "s3", `{"query":"restart weather","activate":true}`); err != nil {
		t.Fatal(err)
	}
	if got := s.Refresh(t.Context(), "s3").Active; !slices.Equal(got, []string{"ops", "weather"}) {
		t.Fatalf("s3 active %v", got)
	}
}

func TestSearchInput(t *testing.T) {
	r, s := searchFixture(t, searchCfg)
	for _, in := range []string{
		`{}`, `{"query":""}`, `{"query":"  "}`, `{"query":1}`, `{"query":"x","limit":0.5}`,
		`{"query":"x","limit":51}`, `{"query":"x","limit":-1}`, `{"query":"x","activate":"yes"}`,
		`{"query":"x","extra":1}`, `[1]`, `{"query":"x"} {}`, `{"query":"` + strings.Repeat("a", 1001) + `"}`,
	} {
		_, err := runSearch(t, r, s, "s1", in)
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeInvalidInput || !strings.Contains(be.Message, "search_tools") {
			t.Errorf("%.40s: %v, want invalid_input", in, err)
		}
	}
	if s.Stored("s1") && len(s.Session("s1").Active) > 0 {
		t.Fatal("a refused search changed the session")
	}
}

func TestSearchOffAndListing(t *testing.T) {
	r, s := searchFixture(t, groups.Config{})
	view := s.View(r, s.Session("s1"), nil)
	if got := view.Resolve(groups.SearchTools); got.Code != bus.CodeUnknownTool {
		t.Fatalf("search_tools without Search: %+v", got)
	}
	if slices.Contains(toolNames(view.Tools()), groups.SearchTools) {
		t.Fatal("search_tools listed without Search")
	}
	r, s = searchFixture(t, searchCfg)
	view = s.View(r, s.Session("s1"), nil)
	if got := view.Resolve(groups.SearchTools); !got.Search {
		t.Fatalf("search_tools: %+v", got)
	}
	// Pinned: the tool help_desk (in inactive mail) and the group core.
	want := []string{"whoami", "help_desk", groups.ResetTools, groups.SearchTools}
	if got := toolNames(view.Tools()); !slices.Equal(got, want) {
		t.Fatalf("listing %v, want %v", got, want)
	}
	// A request-scoped tool of the name shadows it.
	req := checkRequest(t, &bus.Request{ExternalTools: []bus.ExternalTool{externalTool(groups.SearchTools)}})
	if got := s.View(r, s.Session("s1"), req).Resolve(groups.SearchTools); got.External == nil {
		t.Fatalf("shadowed: %+v", got)
	}
}

func TestSearchSkills(t *testing.T) {
	r, s := searchFixture(t, searchCfg)
	skills := []groups.SkillDoc{
		{Name: "pdf-forms", Description: "Fill in PDF forms."},
		{Name: "storm-report", Description: "Write a storm report from weather data.", Groups: []string{"weather"}},
		{Name: "runbook", Description: "Restart servers by the runbook.", Groups: []string{"ops"}},
	}
	view := s.View(r, s.Session("s1"), nil)
	text, err := view.Search(t.Context(), "s1", json.RawMessage(`{"query":"storm report pdf runbook"}`), skills)
	if err != nil {
		t.Fatal(err)
	}
	if got := foundNames(text); !slices.Equal(got, []string{"storm-report", "pdf-forms"}) && !slices.Equal(got, []string{"pdf-forms", "storm-report"}) {
		t.Fatalf("skills found %v\n%s", got, text)
	}
}

// TestSearchShrinksListing is the measure: 500 tools in 50 meta
// groups; the model starts with the pinned few, finds and activates what it
// needs with one call.
func TestSearchShrinksListing(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{Search: true, Pinned: groups.Pins{Tools: []string{"t0_0", "t1_0", "t2_0"}}})
	r := registry.New(st, registry.Config{})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	var defs []bus.ToolDef
	for g := range 50 {
		put(t, s, meta(fmt.Sprintf("g%d", g), fmt.Sprintf("Topic %d tools.", g)))
		for i := range 10 {
			defs = append(defs, bus.ToolDef{Name: fmt.Sprintf("t%d_%d", g, i), Description: fmt.Sprintf("Does thing %d of topic%d.", i, g),
				InputSchema: json.RawMessage(`{"type":"object","properties":{}}`), Groups: []string{fmt.Sprintf("g%d", g)}})
		}
	}
	if ack, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w", Tools: defs}); err != nil || len(ack.Rejected) != 0 {
		t.Fatalf("register: %v %v", err, ack.Rejected)
	}
	before := len(s.View(r, s.Refresh(t.Context(), "s"), nil).Tools())
	if _, err := s.View(r, s.Refresh(t.Context(), "s"), nil).Search(t.Context(), "s", json.RawMessage(`{"query":"topic17","limit":3,"activate":true}`), nil); err != nil {
		t.Fatal(err)
	}
	after := toolNames(s.View(r, s.Refresh(t.Context(), "s"), nil).Tools())
	t.Logf("500 tools: listed %d before the search, %d after", before, len(after))
	if before != 3+2 || len(after) != 3+10+2 || !slices.Contains(after, "t17_9") {
		t.Fatalf("before %d, after %v", before, after)
	}
}

func FuzzParseSearch(f *testing.F) {
	for _, s := range []string{`{"query":"weather"}`, `{"query":"x","limit":50,"activate":true}`, `{"query":1}`, `[]`, `{"query":"a"}{}`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := groups.ParseSearch(json.RawMessage(in))
		if err != nil {
			var be *bus.Error
			if !errors.As(err, &be) || be.Code != bus.CodeInvalidInput {
				t.Fatalf("%q: %v", in, err)
			}
			return
		}
		if strings.TrimSpace(got.Query) == "" || got.Limit < 1 || got.Limit > groups.MaxSearchLimit || len(got.Query) > groups.MaxSearchQuery {
			t.Fatalf("%q accepted as %+v", in, got)
		}
	})
}

// TestSearchFollowsChanges: after the index is built, a re-registered
// definition is found by its new words and no longer by its old ones, a
// group's new description reaches its tools, a new tool is found, and a
// deleted one is not (the index changes incrementally: docs/guardrails.md).
func TestSearchFollowsChanges(t *testing.T) {
	r, s := searchFixture(t, searchCfg)
	found := func(query string) []string {
		t.Helper()
		text, err := runSearch(t, r, s, "s1", fmt.Sprintf(`{"query":%q}`, query))
		if err != nil {
			t.Fatal(err)
		}
		return foundNames(text)
	}
	if got := found("conditions"); !slices.Equal(got, []string{"get_weather"}) {
		t.Fatalf("before: %v", got)
	}
	register := func(defs ...bus.ToolDef) {
		t.Helper()
		if ack, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w1", Tools: defs}); err != nil || len(ack.Rejected) != 0 {
			t.Fatalf("register: %+v %v", ack, err)
		}
	}
	obj := json.RawMessage(`{"type":"object"}`)
	register(bus.ToolDef{Name: "get_weather", Description: "Temperature and wind in a town.", InputSchema: obj, Groups: []string{"weather"}},
		bus.ToolDef{Name: "get_tides", Description: "Tide tables of a harbour.", InputSchema: obj, Groups: []string{"weather"}})
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if got := found("wind"); !slices.Equal(got, []string{"get_weather"}) {
			return fmt.Errorf("new words: %v", got)
		}
		return nil
	})
	if got := found("conditions"); len(got) != 0 {
		t.Errorf("old words still find %v", got)
	}
	if got := found("harbour"); !slices.Equal(got, []string{"get_tides"}) {
		t.Errorf("a new tool: %v", got)
	}
	put(t, s, bus.Group{Name: "mail", Description: "Post and parcels.", Scope: bus.ScopeMeta})
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if got := found("parcels"); !slices.Equal(got, []string{"help_desk", "send_email"}) && !slices.Equal(got, []string{"send_email", "help_desk"}) {
			return fmt.Errorf("a group's new description: %v", got)
		}
		return nil
	})
	if err := r.Delete(t.Context(), "get_tides"); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if got := found("harbour"); len(got) != 0 {
			return fmt.Errorf("a deleted tool: %v", got)
		}
		return nil
	})
}
