package embedded

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// deferredListing asks for session's listing with deferred tools.
func deferredListing(t *testing.T, e *env, session, format string) *bus.ToolsList {
	t.Helper()
	list, err := e.client.Query(testCtx(t), session, bus.ToolsQuery{Format: format, Deferred: true})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// entryNames are the names of a listing's entries, a namespace as
// "ns:<name>[<its tools>]" and a nameless entry as its type.
func entryNames(t *testing.T, tools []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, raw := range tools {
		var e struct {
			Type         string            `json:"type"`
			Name         string            `json:"name"`
			DeferLoading bool              `json:"defer_loading"`
			Tools        []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		switch {
		case e.Type == "namespace":
			out = append(out, "ns:"+e.Name+"["+strings.Join(entryNames(t, e.Tools), ",")+"]")
		case e.Name == "":
			out = append(out, e.Type)
		case e.DeferLoading:
			out = append(out, e.Name+"*")
		default:
			out = append(out, e.Name)
		}
	}
	return out
}

func activeGroups(list *bus.ToolsList) []string {
	var out []string
	for _, g := range list.Groups {
		if g.Active && g.Scope != bus.ScopeBasic {
			out = append(out, g.Name)
		}
	}
	return out
}

// TestDeferredListing: with deferred set, the tools of inactive meta
// groups are listed for the provider's tool search, each under its first
// meta group; a tool of an external-scope group the session cannot
// activate is not offered; other formats are refused.
func TestDeferredListing(t *testing.T) {
	e := groupEnv(t, 1)
	cases := []struct {
		format string
		want   []string
	}{
		{bus.FormatOpenAIResponses, []string{"echo", "reset_tools", "ns:ops[deploy*,both*]", "ns:web[search*]", "tool_search"}},
		{bus.FormatAnthropic, []string{"echo", "reset_tools", "deploy*", "both*", "search*", "tool_search_tool_bm25"}},
	}
	for _, c := range cases {
		t.Run(c.format, func(t *testing.T) {
			list := deferredListing(t, e, "deferred-list", c.format)
			if got := entryNames(t, list.Tools); !slices.Equal(got, c.want) {
				t.Errorf("listing = %v, want %v", got, c.want)
			}
			want := map[string]string{"deploy": "ops", "both": "ops", "search": "web"}
			if len(list.Deferred) != len(want) {
				t.Errorf("deferred = %v", list.Deferred)
			}
			for k, v := range want {
				if list.Deferred[k] != v {
					t.Errorf("deferred = %v", list.Deferred)
				}
			}
			raw, _ := json.Marshal(list.Tools)
			if strings.Contains(string(raw), "audit") || strings.Contains(string(raw), "admin") {
				t.Errorf("an external-scope group's tool is offered: %s", raw)
			}
		})
	}
	// Tools hidden by the request are not deferred either (4.3).
	for _, c := range []struct {
		req  *bus.Request
		want []string
	}{
		{&bus.Request{MergeMode: bus.MergeExternalOnly}, nil},
		{&bus.Request{ExternalTools: []bus.ExternalTool{{Name: "deploy", Description: "Mine.", InputSchema: json.RawMessage(`{"type":"object"}`)}}},
			[]string{"echo", "reset_tools", "deploy", "ns:ops[both*]", "ns:web[search*]", "tool_search"}},
	} {
		list, err := e.client.Query(testCtx(t), "deferred-list", bus.ToolsQuery{Format: bus.FormatOpenAIResponses, Deferred: true, Request: c.req})
		if err != nil {
			t.Fatal(err)
		}
		if got := entryNames(t, list.Tools); !slices.Equal(got, c.want) || list.Deferred["deploy"] != "" {
			t.Errorf("request %+v: listing %v, deferred %v", c.req, got, list.Deferred)
		}
	}
	for _, f := range []string{bus.FormatOpenAI, bus.FormatGemini, bus.FormatMCP, bus.FormatToolbus} {
		_, err := e.client.Query(testCtx(t), "deferred-list", bus.ToolsQuery{Format: f, Deferred: true})
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
			t.Errorf("deferred %s listing: %v", f, err)
		}
	}
}

// TestTurnActivatesLoadedGroups runs provider tool search responses
// through client.Turn against a real router: the loaded tools' groups are
// activated by a reset_tools call ahead of the model's calls (the active
// groups kept), the calls then run, and the reset_tools result is not
// among the model's messages. Loads of an unknown group or of an
// external-scope tool activate nothing, and the call fails as it would
// without them.
func TestTurnActivatesLoadedGroups(t *testing.T) {
	e := groupEnv(t, 1)
	ctx := testCtx(t)

	t.Run("openai-responses hosted search", func(t *testing.T) {
		msg := `{"output":[
		  {"type":"tool_search_call","id":"ts_1","execution":"server","call_id":null,"status":"completed","arguments":{"paths":["ops"]}},
		  {"type":"tool_search_output","id":"tso_1","execution":"server","call_id":null,"status":"completed","tools":[
		    {"type":"namespace","name":"ops","description":"Deploy and roll back.","tools":[{"type":"function","name":"deploy","defer_loading":true,"parameters":{}}]}]},
		  {"type":"function_call","id":"fc_1","call_id":"call_1","namespace":"ops","name":"deploy","arguments":"{\"text\":\"prod\"}"}]}`
		reply, err := e.client.Turn(ctx, "defer-oai", bus.FormatOpenAIResponses, []byte(msg), bus.Batch{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(reply.Activated, []string{"ops"}) || len(reply.Messages) != 1 ||
			!strings.Contains(string(reply.Messages[0]), `"call_id":"call_1","output":"deploy:prod"`) {
			t.Fatalf("activated %v, messages %s", reply.Activated, reply.Messages)
		}
		if got := activeGroups(deferredListing(t, e, "defer-oai", bus.FormatOpenAIResponses)); !slices.Equal(got, []string{"ops"}) {
			t.Errorf("active groups = %v", got)
		}
	})

	t.Run("anthropic server search keeps the active groups", func(t *testing.T) {
		e.call(t, "defer-ant", []bus.Call{{ID: "r", Name: "reset_tools", Input: json.RawMessage(`{"web":true}`)}})
		msg := `{"role":"assistant","content":[
		  {"type":"server_tool_use","id":"srvtoolu_1","name":"tool_search_tool_bm25","input":{"query":"deploy"}},
		  {"type":"tool_search_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"tool_search_tool_search_result",
		    "tool_references":[{"type":"tool_reference","tool_name":"deploy"}]}},
		  {"type":"tool_use","id":"toolu_1","name":"deploy","input":{"text":"staging"}},
		  {"type":"tool_use","id":"toolu_2","name":"search","input":{"text":"q"}}]}`
		reply, err := e.client.Turn(ctx, "defer-ant", bus.FormatAnthropic, []byte(msg), bus.Batch{})
		if err != nil {
			t.Fatal(err)
		}
		m := string(reply.Messages[0])
		if !slices.Equal(reply.Activated, []string{"ops"}) || strings.Contains(m, "is_error") ||
			!strings.Contains(m, "deploy:staging") || !strings.Contains(m, "search:q") || strings.Contains(m, "toolbus-load") {
			t.Fatalf("activated %v, message %s", reply.Activated, m)
		}
		if got := activeGroups(deferredListing(t, e, "defer-ant", bus.FormatAnthropic)); !slices.Equal(got, []string{"ops", "web"}) {
			t.Errorf("active groups = %v", got)
		}
	})

	t.Run("search without calls activates", func(t *testing.T) {
		msg := `{"output":[{"type":"tool_search_output","execution":"server","status":"completed","tools":[{"type":"namespace","name":"web","tools":[]}]},
		  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Found it."}]}]}`
		if _, err := e.client.Turn(ctx, "defer-none", bus.FormatOpenAIResponses, []byte(msg), bus.Batch{}); !errors.Is(err, client.ErrNoToolCalls) {
			t.Fatalf("err = %v", err)
		}
		if got := activeGroups(deferredListing(t, e, "defer-none", bus.FormatOpenAIResponses)); !slices.Equal(got, []string{"web"}) {
			t.Errorf("active groups = %v", got)
		}
	})

	t.Run("unknown group and external scope", func(t *testing.T) {
		msg := `{"output":[
		  {"type":"tool_search_output","tools":[{"type":"namespace","name":"nope","tools":[]},{"type":"namespace","name":"admin","tools":[]},{"type":"function","name":"audit"}]},
		  {"type":"function_call","call_id":"call_1","namespace":"admin","name":"audit","arguments":"{}"}]}`
		reply, err := e.client.Turn(ctx, "defer-bad", bus.FormatOpenAIResponses, []byte(msg), bus.Batch{})
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Activated) != 0 || !strings.Contains(string(reply.Messages[0]), "ToolGroupInactiveError") {
			t.Fatalf("activated %v, messages %s", reply.Activated, reply.Messages)
		}
		list := deferredListing(t, e, "defer-bad", bus.FormatOpenAIResponses)
		if got := activeGroups(list); len(got) != 0 {
			t.Errorf("active groups = %v", got)
		}
	})
}
