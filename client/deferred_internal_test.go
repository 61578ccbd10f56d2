package client

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
)

// TestParseLoads: the provider's tool search output becomes loads, in the
// documented shapes of docs/schemas.md ("Deferred tools").
func TestParseLoads(t *testing.T) {
	cases := []struct {
		name, format, msg string
		calls             int
		want              []load
	}{
		{"responses hosted search then a namespaced call", bus.FormatOpenAIResponses, `{"output":[
			{"type":"tool_search_call","id":"ts_1","execution":"server","call_id":null,"status":"completed","arguments":{"paths":["ops"]}},
			{"type":"tool_search_output","id":"tso_1","execution":"server","call_id":null,"status":"completed","tools":[
				{"type":"namespace","name":"ops","description":"Deploy.","tools":[{"type":"function","name":"deploy","defer_loading":true,"parameters":{}}]},
				{"type":"function","name":"lonely","parameters":{}}, {"type":"namespace"}, 7]},
			{"type":"function_call","call_id":"c1","namespace":"ops","name":"deploy","arguments":"{}"}]}`,
			1, []load{{group: "ops"}, {tool: "lonely"}, {group: "ops", tool: "deploy"}}},
		{"responses plain call loads nothing", bus.FormatOpenAIResponses, `[{"type":"function_call","call_id":"c1","name":"echo","arguments":"{}"}]`, 1, nil},
		{"responses search without calls", bus.FormatOpenAIResponses, `{"output":[{"type":"tool_search_output","tools":[{"type":"namespace","name":"web","tools":[]}]},{"type":"message","content":[]}]}`, 0, []load{{group: "web"}}},
		{"anthropic server search", bus.FormatAnthropic, `{"role":"assistant","content":[
			{"type":"server_tool_use","id":"srvtoolu_1","name":"tool_search_tool_bm25","input":{"query":"deploy"}},
			{"type":"tool_search_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"tool_search_tool_search_result","tool_references":[
				{"type":"tool_reference","tool_name":"deploy"},{"type":"tool_reference","tool_name":""},{"type":"other","tool_name":"x"}]}},
			{"type":"tool_use","id":"toolu_1","name":"deploy","input":{}}]}`, 1, []load{{tool: "deploy"}}},
		{"anthropic search error", bus.FormatAnthropic, `[{"type":"tool_search_tool_result","tool_use_id":"s","content":{"type":"tool_search_tool_result_error","error_code":"unavailable"}}]`, 0, nil},
		{"anthropic malformed content", bus.FormatAnthropic, `[{"type":"tool_search_tool_result","tool_use_id":"s","content":"nope"}]`, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			turn, err := parseTurn(c.format, []byte(c.msg))
			if err != nil {
				t.Fatal(err)
			}
			if len(turn.Calls) != c.calls {
				t.Errorf("calls = %v", turn.Calls)
			}
			if diff := cmp.Diff(c.want, turn.loads, cmp.AllowUnexported(load{})); diff != "" {
				t.Errorf("loads (-want +got)\n%s", diff)
			}
			if _, err := ParseModelTurn(c.format, []byte(c.msg)); c.calls == 0 && !errors.Is(err, ErrNoToolCalls) {
				t.Errorf("ParseModelTurn without calls: %v", err)
			}
		})
	}
}

// TestLoadGroups: the final set keeps the active meta groups and adds the
// loaded ones the listing offered deferred; an unknown group, an
// external-scope group and a tool not deferred are ignored.
func TestLoadGroups(t *testing.T) {
	list := &bus.ToolsList{
		Groups: []bus.GroupInfo{{Name: "basic", Scope: bus.ScopeBasic, Active: true}, {Name: "ops", Scope: bus.ScopeMeta},
			{Name: "web", Scope: bus.ScopeMeta, Active: true}, {Name: "db", Scope: bus.ScopeMeta}, {Name: "admin", Scope: bus.ScopeExternal, Active: true}},
		Deferred: map[string]string{"deploy": "ops", "query": "db"},
	}
	cases := []struct {
		name         string
		loads        []load
		final, added []string
	}{
		{"namespace", []load{{group: "ops"}}, []string{"web", "ops"}, []string{"ops"}},
		{"tool", []load{{tool: "query"}}, []string{"web", "db"}, []string{"db"}},
		{"both, twice", []load{{group: "db"}, {tool: "deploy"}, {group: "ops", tool: "deploy"}}, []string{"web", "db", "ops"}, []string{"db", "ops"}},
		{"unknown namespace falls back to the tool", []load{{group: "nope", tool: "deploy"}}, []string{"web", "ops"}, []string{"ops"}},
		{"unknown group", []load{{group: "nope"}}, []string{"web"}, nil},
		{"external group", []load{{group: "admin"}, {tool: "audit"}}, []string{"web"}, nil},
		{"already active", []load{{group: "web"}}, []string{"web"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			final, added := loadGroups(list, c.loads)
			if !cmp.Equal(final, c.final) || !cmp.Equal(added, c.added) {
				t.Errorf("final %v added %v, want %v %v", final, added, c.final, c.added)
			}
		})
	}
	if got := string(ResetInput([]string{"web", `o"ps`})); got != `{"web":true,"o\"ps":true}` {
		t.Errorf("resetInput = %s", got)
	}
}
