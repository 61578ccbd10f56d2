package conformance

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// orderedKeys returns the member names of a JSON object in document order.
func orderedKeys(t testing.TB, raw json.RawMessage) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// member returns raw[key] of a JSON object.
func member(t testing.TB, raw json.RawMessage, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not an object: %s", raw)
	}
	return m[key]
}

var weatherSchema = M{"type": "object", "properties": M{"city": M{"type": "string", "description": "City name."}},
	"required": []string{"city"}}

// TestListingFormats: each format of docs/protocol.md 4.1 has exactly its keys,
// with the tool's name, description and schema unchanged.
func TestListingFormats(t *testing.T) {
	s := start(t)
	s.serve(t, echo, def("get_weather", M{"description": "Weather now.", "input_schema": weatherSchema,
		"read_only": true, "idempotent": true}), def("deploy", M{"description": "Deploy.", "concurrency_safe": false}))

	check := func(format string, fn func(t *testing.T, name string, raw json.RawMessage)) {
		t.Run(format, func(t *testing.T) {
			q := M{"format": format}
			if format == "" {
				q = M{}
			}
			l := s.list(t, "s1", q)
			if got := names(t, l.Tools); !slices.Equal(got, []string{"get_weather", "deploy"}) {
				t.Fatalf("tools %v", got)
			}
			for i, n := range []string{"get_weather", "deploy"} {
				fn(t, n, l.Tools[i])
			}
		})
	}
	schemaOf := func(t *testing.T, name string) M {
		if name == "get_weather" {
			return weatherSchema
		}
		return M{"type": "object", "properties": M{}}
	}
	check("openai", func(t *testing.T, name string, raw json.RawMessage) {
		wantKeys(t, "openai tool", raw, "type", "function")
		if string(member(t, raw, "type")) != `"function"` {
			t.Errorf("type %s", member(t, raw, "type"))
		}
		fn := member(t, raw, "function")
		wantKeys(t, "openai function", fn, "name", "description", "parameters")
		if !jsonEqual(member(t, fn, "parameters"), schemaOf(t, name)) {
			t.Errorf("parameters %s", member(t, fn, "parameters"))
		}
	})
	check("openai-responses", func(t *testing.T, name string, raw json.RawMessage) {
		wantKeys(t, "openai-responses tool", raw, "type", "name", "description", "parameters", "strict")
		if string(member(t, raw, "type")) != `"function"` || string(member(t, raw, "strict")) != "false" {
			t.Errorf("tool %s", raw)
		}
		if !jsonEqual(member(t, raw, "parameters"), schemaOf(t, name)) {
			t.Errorf("parameters %s", member(t, raw, "parameters"))
		}
	})
	check("anthropic", func(t *testing.T, name string, raw json.RawMessage) {
		wantKeys(t, "anthropic tool", raw, "name", "description", "input_schema")
		if !jsonEqual(member(t, raw, "input_schema"), schemaOf(t, name)) {
			t.Errorf("input_schema %s", member(t, raw, "input_schema"))
		}
		if name == "get_weather" && string(member(t, raw, "description")) != `"Weather now."` {
			t.Errorf("description %s", member(t, raw, "description"))
		}
	})
	check("gemini", func(t *testing.T, name string, raw json.RawMessage) {
		wantKeys(t, "gemini tool", raw, "name", "description", "parametersJsonSchema")
		if !jsonEqual(member(t, raw, "parametersJsonSchema"), schemaOf(t, name)) {
			t.Errorf("parametersJsonSchema %s", member(t, raw, "parametersJsonSchema"))
		}
	})
	check("mcp", func(t *testing.T, name string, raw json.RawMessage) {
		wantKeys(t, "mcp tool", raw, "name", "description", "inputSchema", "annotations")
		if !jsonEqual(member(t, raw, "inputSchema"), schemaOf(t, name)) {
			t.Errorf("inputSchema %s", member(t, raw, "inputSchema"))
		}
		ann := member(t, raw, "annotations")
		wantKeys(t, "mcp annotations", ann, "readOnlyHint", "destructiveHint", "idempotentHint")
		var a struct{ ReadOnlyHint, DestructiveHint, IdempotentHint bool }
		_ = json.Unmarshal(ann, &a)
		ro := name == "get_weather"
		if a.ReadOnlyHint != ro || a.IdempotentHint != ro {
			t.Errorf("%s annotations %s: readOnlyHint and idempotentHint must follow read_only and idempotent", name, ann)
		}
	})
	for _, f := range []string{"toolbus", ""} {
		check(f, func(t *testing.T, name string, raw json.RawMessage) {
			hasKeys(t, "toolbus definition", raw, "name", "description", "input_schema", "read_only", "concurrency_safe",
				"idempotent", "external", "state_injected", "timeout_ms", "max_attempts", "permission", "rule_matcher")
			var d struct {
				ReadOnly        bool   `json:"read_only"`
				ConcurrencySafe bool   `json:"concurrency_safe"`
				TimeoutMS       int    `json:"timeout_ms"`
				MaxAttempts     int    `json:"max_attempts"`
				Permission      string `json:"permission"`
				RuleMatcher     string `json:"rule_matcher"`
			}
			_ = json.Unmarshal(raw, &d)
			if d.ReadOnly != (name == "get_weather") || d.ConcurrencySafe != (name == "get_weather") ||
				d.TimeoutMS != 300000 || d.MaxAttempts != 1 || d.Permission != "allow" || d.RuleMatcher != "none" {
				t.Errorf("definition %s: want the registered values and the defaults of docs/protocol.md 7", raw)
			}
			if !jsonEqual(member(t, raw, "input_schema"), schemaOf(t, name)) {
				t.Errorf("input_schema %s", member(t, raw, "input_schema"))
			}
		})
	}
}

// TestListingReplyShape: {"tools", "groups": [{name, description, scope,
// active}], "skills_prompt"}; basic is listed and active.
func TestListingReplyShape(t *testing.T) {
	s := start(t)
	e := s.listRaw(t, "s1", nil) // a query without data asks for the defaults
	if e.Type != tToolsList {
		t.Fatalf("reply %s %s", e.Type, e.Data)
	}
	fromRouter(t, e)
	wantKeys(t, "tools.list", e.Data, "tools", "groups", "skills_prompt")
	var raw struct {
		Tools  []json.RawMessage `json:"tools"`
		Groups []json.RawMessage `json:"groups"`
	}
	dataAs(t, e, &raw)
	if raw.Tools == nil {
		t.Errorf("tools must be a list: %s", e.Data)
	}
	var l ToolsList
	dataAs(t, e, &l)
	for _, g := range raw.Groups {
		wantKeys(t, "group", g, "name", "description", "scope", "active")
	}
	if len(l.Groups) == 0 || l.Groups[0].Name != "basic" || !l.Groups[0].Active {
		t.Errorf("groups %v: want basic, active", l.Groups)
	}
}

// TestListingUnknownFormat: an unknown format is bad_request.
func TestListingUnknownFormat(t *testing.T) {
	s := start(t)
	wantError(t, s.listRaw(t, "s1", M{"format": "langchain"}), "bad_request", "")
}

// TestListingOrderAndVisibility: basic and active groups' tools with a
// live worker (external tools need none), then reset_tools when a meta
// group exists, then the request's external tools (docs/protocol.md 4.1).
func TestListingOrderAndVisibility(t *testing.T) {
	s := start(t)
	groups := []M{{"name": "ops", "description": "Operations.", "scope": "meta"}}
	s.startWorker(t, []M{def("alpha"), def("opstool", M{"groups": []string{"ops"}})}, groups, echo)
	s.startWorker(t, []M{def("beta"), def("handoff", M{"external": true})}, nil, echo)
	gone := s.startWorker(t, []M{def("ghost")}, nil, echo)
	s.waitListed(t, "s1", "alpha", "beta", "handoff", "ghost")
	gone.leave(t)
	s.waitUnlisted(t, "s1", "ghost")

	req := M{"external_tools": []M{
		{"name": "pick_file", "description": "Pick a file.", "input_schema": M{"type": "object", "properties": M{}}},
		{"name": "ask_user", "description": "Ask.", "input_schema": M{"type": "object", "properties": M{}}},
	}}
	l := s.list(t, "s1", M{"request": req})
	want := []string{"alpha", "beta", "handoff", "reset_tools", "pick_file", "ask_user"}
	if got := names(t, l.Tools); !slices.Equal(got, want) {
		t.Fatalf("tools %v, want %v", got, want)
	}
	wantGroups := []GroupInfo{{Name: "basic", Scope: "basic", Active: true}, {Name: "ops", Description: "Operations.", Scope: "meta"}}
	if len(l.Groups) != 2 || l.Groups[0].Name != "basic" || l.Groups[1] != wantGroups[1] {
		t.Errorf("groups %v, want %v", l.Groups, wantGroups)
	}
	// Without a meta group there is no reset_tools.
	s2 := start(t)
	s2.serve(t, echo, def("alpha"))
	if got := names(t, s2.list(t, "s1", nil).Tools); !slices.Equal(got, []string{"alpha"}) {
		t.Fatalf("tools %v, want only alpha", got)
	}
}

// resetText runs reset_tools with input in session and returns its result.
func resetCall(t testing.TB, s *sys, session, replyID string, input any) Result {
	t.Helper()
	r := s.call(t, session, replyID, callsData(Call{ID: "c1", Name: "reset_tools", Input: input}))
	return r.Results[0]
}

// groupsFixture defines meta groups g1 (with instructions), g2, g3 and an
// external-scope group x, in that order, with one tool in each.
func groupsFixture(t *testing.T) *sys {
	s := start(t)
	groups := []M{
		{"name": "g1", "description": "Group one.", "instructions": "Use t1 carefully.", "scope": "meta"},
		{"name": "g2", "description": "Group two.", "scope": "meta"},
		{"name": "x", "description": "Operator group.", "scope": "external"},
		{"name": "g3", "description": "Group three.", "instructions": "t3 is slow.", "scope": "meta"},
	}
	s.startWorker(t, []M{def("t1", M{"groups": []string{"g1"}}), def("t2", M{"groups": []string{"g2"}}),
		def("tx", M{"groups": []string{"x"}}), def("t3", M{"groups": []string{"g3"}}), def("tb")}, groups, echo)
	s.waitListed(t, "probe", "tb", "reset_tools")
	return s
}

// TestResetToolsSchema: one boolean property per meta-scope group, in
// registration order, "default": false, the group's description, and no
// "required" (docs/protocol.md 4.2).
func TestResetToolsSchema(t *testing.T) {
	s := groupsFixture(t)
	l := s.list(t, "s1", M{"format": "anthropic"})
	var schema json.RawMessage
	for _, raw := range l.Tools {
		if string(member(t, raw, "name")) == `"reset_tools"` {
			schema = member(t, raw, "input_schema")
		}
	}
	if schema == nil {
		t.Fatalf("reset_tools not listed: %v", names(t, l.Tools))
	}
	if member(t, schema, "required") != nil {
		t.Errorf("schema has required: %s", schema)
	}
	if string(member(t, schema, "type")) != `"object"` {
		t.Errorf("schema type %s", member(t, schema, "type"))
	}
	props := member(t, schema, "properties")
	if got := orderedKeys(t, props); !slices.Equal(got, []string{"g1", "g2", "g3"}) {
		t.Fatalf("properties %v, want the meta groups in registration order [g1 g2 g3]", got)
	}
	for g, desc := range map[string]string{"g1": "Group one.", "g2": "Group two.", "g3": "Group three."} {
		if !jsonEqual(member(t, props, g), M{"type": "boolean", "default": false, "description": desc}) {
			t.Errorf("property %s: %s", g, member(t, props, g))
		}
	}
}

// TestResetToolsTexts: the fixed texts of docs/protocol.md 4.2.
func TestResetToolsTexts(t *testing.T) {
	s := groupsFixture(t)
	const avail = "The current available groups are: g1, g2, g3"
	cases := []struct {
		name  string
		input string
		state string
		text  string
	}{
		{"activate in reverse order", `{"g3": true, "g2": false, "g1": true}`, "success",
			"The currently activated tool group(s): g1, g3.\n<tool-instructions>\n" +
				"The tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups.\n" +
				"<group name=\"g1\">Use t1 carefully.</group>\n<group name=\"g3\">t3 is slow.</group>\n</tool-instructions>"},
		{"no instructions", `{"g2": true}`, "success", "The currently activated tool group(s): g2."},
		{"all false", `{"g1": false, "g2": false}`, "success", "All tool groups are currently deactivated."},
		{"empty", `{}`, "success", "All tool groups are currently deactivated."},
		{"unknown group", `{"zz": true, "g1": true, "aa": false}`, "error", "Invalid group name(s): zz, aa. " + avail},
		{"basic", `{"basic": true}`, "error", "Invalid group name(s): basic. " + avail},
		{"external scope", `{"x": true}`, "error", "Invalid group name(s): x. " + avail},
		{"string", `{"g1": "true"}`, "error", "Invalid arguments: the argument 'g1' should be a bool value, but got string."},
		{"number", `{"g1": 1}`, "error", "Invalid arguments: the argument 'g1' should be a bool value, but got number."},
		{"object", `{"g1": {}}`, "error", "Invalid arguments: the argument 'g1' should be a bool value, but got object."},
		{"array", `{"g1": [true]}`, "error", "Invalid arguments: the argument 'g1' should be a bool value, but got array."},
		{"null", `{"g1": null}`, "error", "Invalid arguments: the argument 'g1' should be a bool value, but got null."},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := resetCall(t, s, "s1", "r"+string(rune('a'+i)), json.RawMessage(tc.input))
			if tc.state == "success" {
				wantSuccess(t, r, tc.text)
				return
			}
			wantFailure(t, r, "error", "invalid_input", tc.text)
		})
	}
}

// TestResetToolsFinalSet: the input is the final set; validation happens
// first and a failure changes nothing; activation is per session.
func TestResetToolsFinalSet(t *testing.T) {
	s := groupsFixture(t)
	visible := func(session string) []string { return names(t, s.list(t, session, nil).Tools) }
	wantSuccess(t, resetCall(t, s, "s1", "r1", M{"g2": true, "g1": true}), "The currently activated tool group(s): g1, g2.\n<tool-instructions>\n"+
		"The tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups.\n"+
		"<group name=\"g1\">Use t1 carefully.</group>\n</tool-instructions>")
	if got := visible("s1"); !slices.Equal(got, []string{"t1", "t2", "tb", "reset_tools"}) {
		t.Fatalf("after activating g1, g2: %v", got)
	}
	if got := visible("s2"); !slices.Equal(got, []string{"tb", "reset_tools"}) {
		t.Fatalf("another session sees %v, want only basic", got)
	}
	// A failing call changes nothing, even for its valid keys.
	wantFailure(t, resetCall(t, s, "s1", "r2", json.RawMessage(`{"g3": true, "nope": true}`)), "error", "invalid_input", "")
	wantFailure(t, resetCall(t, s, "s1", "r3", json.RawMessage(`{"g3": true, "g1": "no"}`)), "error", "invalid_input", "")
	if got := visible("s1"); !slices.Equal(got, []string{"t1", "t2", "tb", "reset_tools"}) {
		t.Fatalf("after failed resets: %v", got)
	}
	// The final set: g3 only.
	wantSuccess(t, resetCall(t, s, "s1", "r4", M{"g3": true}), "The currently activated tool group(s): g3.\n<tool-instructions>\n"+
		"The tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups.\n"+
		"<group name=\"g3\">t3 is slow.</group>\n</tool-instructions>")
	if got := visible("s1"); !slices.Equal(got, []string{"t3", "tb", "reset_tools"}) {
		t.Fatalf("after the final set g3: %v", got)
	}
	// groups reports activation.
	for _, g := range s.list(t, "s1", nil).Groups {
		if want := g.Name == "basic" || g.Name == "g3"; g.Active != want {
			t.Errorf("group %s active %v, want %v", g.Name, g.Active, want)
		}
	}
}

// TestInactiveToolText: calling a tool of an inactive group gives
// inactive_tool with the fixed text naming the tool's first group in
// registration order; a tool in several groups is visible when any is active.
func TestInactiveToolText(t *testing.T) {
	s := start(t)
	groups := []M{{"name": "a", "description": "A.", "scope": "meta"}, {"name": "b", "description": "B.", "scope": "meta"}}
	w := s.startWorker(t, []M{def("multi", M{"groups": []string{"b", "a"}})}, groups, echo)
	s.waitListed(t, "probe", "reset_tools")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "multi"}))
	wantFailure(t, r.Results[0], "error", "inactive_tool",
		"ToolGroupInactiveError: The tool 'multi' in group 'a' is currently inactive. You should first activate the group by calling the 'reset_tools' tool.")
	if w.execs.Load() != 0 {
		t.Fatal("an inactive tool ran")
	}
	// Activating b alone (the tool's first listed group) makes it visible,
	// within the same batch: later calls see the new activation.
	r = s.call(t, "s1", "r2", callsData(Call{ID: "c1", Name: "reset_tools", Input: M{"b": true}}, Call{ID: "c2", Name: "multi"}))
	wantSuccess(t, r.Results[0], "The currently activated tool group(s): b.")
	wantSuccess(t, r.Results[1], "multi ran")
}

// TestExternalScopeGroups: external-scope groups are switched only by
// operators (session.activate), not by reset_tools.
func TestExternalScopeGroups(t *testing.T) {
	s := groupsFixture(t)
	if slices.Contains(names(t, s.list(t, "s1", nil).Tools), "tx") {
		t.Fatal("tx listed before activation")
	}
	s.adminOK(t, "session.activate", "s1", M{"groups": []string{"x"}, "active": true})
	if !slices.Contains(names(t, s.list(t, "s1", nil).Tools), "tx") {
		t.Fatal("tx not listed after session.activate")
	}
	// reset_tools leaves external groups alone.
	wantSuccess(t, resetCall(t, s, "s1", "r1", M{}), "All tool groups are currently deactivated.")
	r := s.call(t, "s1", "r2", callsData(Call{ID: "c1", Name: "tx"}))
	wantSuccess(t, r.Results[0], "tx ran")
	s.adminOK(t, "session.activate", "s1", M{"groups": []string{"x"}, "active": false})
	r = s.call(t, "s1", "r3", callsData(Call{ID: "c1", Name: "tx"}))
	wantFailure(t, r.Results[0], "error", "inactive_tool", "")
}

// TestActiveByDefault: a new session starts with the groups whose
// active_by_default is true.
func TestActiveByDefault(t *testing.T) {
	s := start(t)
	s.startWorker(t, []M{def("dt", M{"groups": []string{"d"}})},
		[]M{{"name": "d", "description": "D.", "scope": "meta", "active_by_default": true}}, echo)
	s.waitListed(t, "fresh", "dt", "reset_tools")
	r := s.call(t, "fresh2", "r1", callsData(Call{ID: "c1", Name: "dt"}))
	wantSuccess(t, r.Results[0], "dt ran")
}

// TestActivationSharedByRouters: activation is stored in KV and every
// router sees it at once.
func TestActivationSharedByRouters(t *testing.T) {
	s := groupsFixture(t)
	s.addRouter()
	s.addRouter()
	wantSuccess(t, resetCall(t, s, "s1", "r1", M{"g2": true}), "The currently activated tool group(s): g2.")
	for i := range 12 {
		if got := names(t, s.list(t, "s1", nil).Tools); !slices.Contains(got, "t2") {
			t.Fatalf("listing %d: %v, t2 missing", i, got)
		}
		r := s.call(t, "s1", "x"+string(rune('a'+i)), callsData(Call{ID: "c1", Name: "t2"}))
		wantSuccess(t, r.Results[0], "t2 ran")
	}
}
