package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

var testGroups = []bus.Group{
	{Name: "ops", Description: "Deploy and roll back.", Instructions: "Deploy to staging first.", Scope: bus.ScopeMeta},
	{Name: "web", Description: "Search the web.", Scope: bus.ScopeMeta},
	{Name: "admin", Description: "Operator tools.", Scope: bus.ScopeExternal},
}

type textIn struct {
	Text string `json:"text,omitempty"`
}

// groupEnv starts routers and a worker serving echo (basic), deploy (ops),
// search (web), both (web, ops) and audit (admin).
func groupEnv(t *testing.T, routers int) *env {
	t.Helper()
	e := startEnvBeat(t, routers, onCluster(t), router.Config{}, calmHeartbeat)
	for _, g := range testGroups {
		if err := e.client.Admin(t.Context(), "groups.put", "", g, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.addWorker(func(w *worker.Worker) {
		for _, d := range []bus.ToolDef{
			{Name: "echo", Description: "Echo."},
			{Name: "deploy", Description: "Deploy.", Groups: []string{"ops"}, ReadOnly: true},
			{Name: "search", Description: "Search.", Groups: []string{"web"}, ReadOnly: true},
			{Name: "both", Description: "In two groups.", Groups: []string{"web", "ops"}, ReadOnly: true},
			{Name: "audit", Description: "Audit.", Groups: []string{"admin"}, ReadOnly: true},
		} {
			d.ReadOnly = true
			name := d.Name
			if err := worker.Register(w, d, func(_ context.Context, _ *worker.Call, in textIn) (string, error) {
				return name + ":" + in.Text, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	})
	e.waitLive("echo", "deploy", "search", "both", "audit")
	e.waitGroups("ops", "web", "admin")
	return e
}

func (e *env) waitGroups(names ...string) {
	e.t.Helper()
	// Every router lists every defined group in a tools listing.
	query := func() *bus.Event { return newEvent(e.t, bus.TypeToolsQuery, struct{}{}) }
	e.everyRouter(e.t, query, e.client.Subjects().Tools("groups-probe"), func(ev *bus.Event) error {
		var list bus.ToolsList
		if err := ev.DataAs(&list); err != nil {
			return fmt.Errorf("%s: %w", ev.Type, err)
		}
		for _, n := range names {
			if !slices.ContainsFunc(list.Groups, func(g bus.GroupInfo) bool { return g.Name == n }) {
				return fmt.Errorf("group %s not seen", n)
			}
		}
		return nil
	})
}

// sessionStore is a session store of the deployment's buckets on a
// connection of its own, stopped when the test ends.
func (e *env) sessionStore(t *testing.T) *groups.Store {
	t.Helper()
	js := testkit.JetStream(t, e.connect(t))
	st, err := store.Setup(t.Context(), js, e.client.Subjects(), store.Config{Heartbeat: e.d.Heartbeat(), Replicas: e.replicas()})
	if err != nil {
		t.Fatal(err)
	}
	gs := groups.New(st, groups.Config{})
	if err := gs.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, gs.Stop)
	return gs
}

func call1(t *testing.T, c *client.Client, session, name, input string, opts ...client.CallOption) bus.Result {
	t.Helper()
	return callReq(t, c, session, nil, name, input, opts...).Results[0]
}

func callReq(t *testing.T, c *client.Client, session string, req *bus.Request, name, input string, opts ...client.CallOption) *bus.Reply {
	t.Helper()
	var in json.RawMessage
	if input != "" {
		in = json.RawMessage(input)
	}
	reply, err := c.Call(t.Context(), session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: name, Input: in}}, Request: req}, opts...)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return reply
}

func toolNames(t *testing.T, c *client.Client, session string, req *bus.Request) []string {
	t.Helper()
	list, err := c.Tools(t.Context(), session, bus.FormatToolbus, req)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, raw := range list.Tools {
		var d bus.ToolDef
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Name)
	}
	return out
}

func wantText(t *testing.T, r bus.Result, state, code, text string) {
	t.Helper()
	if r.State != state || textOf(r) != text {
		t.Fatalf("result = %s %q\nwant     %s %q", r.State, textOf(r), state, text)
	}
	if code != "" && (r.Error == nil || r.Error.Code != code) {
		t.Fatalf("error = %+v, want code %s", r.Error, code)
	}
}

const inactiveDeploy = "ToolGroupInactiveError: The tool 'deploy' in group 'ops' is currently inactive. You should first activate the group by calling the 'reset_tools' tool."

func TestResetToolsScenarios(t *testing.T) {
	e := groupEnv(t, 1)
	c := e.client
	if got, want := toolNames(t, c, "s1", nil), []string{"echo", "reset_tools"}; !slices.Equal(got, want) {
		t.Fatalf("initial tools = %v, want %v", got, want)
	}
	wantText(t, call1(t, c, "s1", "deploy", `{}`), "error", bus.CodeInactiveTool, inactiveDeploy)

	wantText(t, call1(t, c, "s1", "reset_tools", `{"ops": true}`), "success", "",
		"The currently activated tool group(s): ops.\n<tool-instructions>\n"+
			"The tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups.\n"+
			"<group name=\"ops\">Deploy to staging first.</group>\n</tool-instructions>")
	if got, want := toolNames(t, c, "s1", nil), []string{"echo", "deploy", "both", "reset_tools"}; !slices.Equal(got, want) {
		t.Fatalf("tools after activation = %v, want %v", got, want)
	}
	wantText(t, call1(t, c, "s1", "deploy", `{"text":"x"}`), "success", "", "deploy:x")

	// Invalid names: nothing changes.
	wantText(t, call1(t, c, "s1", "reset_tools", `{"web": true, "bogus": true, "basic": false, "admin": true}`), "error", bus.CodeInvalidInput,
		"Invalid group name(s): bogus, basic, admin. The current available groups are: ops, web")
	wantText(t, call1(t, c, "s1", "reset_tools", `{"web": true, "ops": "yes"}`), "error", bus.CodeInvalidInput,
		"Invalid arguments: the argument 'ops' should be a bool value, but got string.")
	for typ, v := range map[string]string{"number": "1", "object": "{}", "array": "[]", "null": "null"} {
		wantText(t, call1(t, c, "s1", "reset_tools", `{"ops": `+v+`}`), "error", bus.CodeInvalidInput,
			"Invalid arguments: the argument 'ops' should be a bool value, but got "+typ+".")
	}
	wantText(t, call1(t, c, "s1", "deploy", `{}`), "success", "", "deploy:")

	// Final-set semantics: web on, ops off.
	wantText(t, call1(t, c, "s1", "reset_tools", `{"web": true}`), "success", "", "The currently activated tool group(s): web.")
	wantText(t, call1(t, c, "s1", "deploy", `{}`), "error", bus.CodeInactiveTool, inactiveDeploy)
	wantText(t, call1(t, c, "s1", "both", `{}`), "success", "", "both:")
	wantText(t, call1(t, c, "s1", "reset_tools", `{"web": false, "ops": false}`), "success", "", "All tool groups are currently deactivated.")
	wantText(t, call1(t, c, "s1", "reset_tools", `{}`), "success", "", "All tool groups are currently deactivated.")
	// A tool in two groups names its first group in registration order.
	wantText(t, call1(t, c, "s1", "both", `{}`), "error", bus.CodeInactiveTool,
		"ToolGroupInactiveError: The tool 'both' in group 'ops' is currently inactive. You should first activate the group by calling the 'reset_tools' tool.")
	wantText(t, call1(t, c, "s1", "reset_tools", `{"ops": true, "web": true}`), "success", "",
		"The currently activated tool group(s): ops, web.\n<tool-instructions>\n"+
			"The tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups.\n"+
			"<group name=\"ops\">Deploy to staging first.</group>\n</tool-instructions>")
}

func TestResetToolsSchema(t *testing.T) {
	e := groupEnv(t, 1)
	list, err := e.client.Tools(t.Context(), "s1", bus.FormatToolbus, nil)
	if err != nil {
		t.Fatal(err)
	}
	var reset json.RawMessage
	for _, raw := range list.Tools {
		var d bus.ToolDef
		_ = json.Unmarshal(raw, &d)
		if d.Name == "reset_tools" {
			reset = d.InputSchema
		}
	}
	want := `{"type":"object","properties":{"ops":{"type":"boolean","default":false,"description":"Deploy and roll back."},"web":{"type":"boolean","default":false,"description":"Search the web."}}}`
	if string(reset) != want {
		t.Fatalf("reset_tools schema\n got %s\nwant %s", reset, want)
	}
	var gotGroups []string
	for _, g := range list.Groups {
		gotGroups = append(gotGroups, fmt.Sprintf("%s/%s/%v", g.Name, g.Scope, g.Active))
	}
	if want := []string{"basic/basic/true", "ops/meta/false", "web/meta/false", "admin/external/false"}; !slices.Equal(gotGroups, want) {
		t.Fatalf("groups = %v, want %v", gotGroups, want)
	}
}

func TestActivationIsolatedBetweenSessions(t *testing.T) {
	e := groupEnv(t, 1)
	var wg sync.WaitGroup
	for i, g := range []string{"ops", "web"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := fmt.Sprintf("iso%d", i)
			for range 5 {
				r := call1(t, e.client, s, "reset_tools", `{"`+g+`": true}`)
				if r.State != "success" {
					t.Errorf("%s: %s", s, textOf(r))
				}
			}
		}()
	}
	wg.Wait()
	if got := toolNames(t, e.client, "iso0", nil); !slices.Contains(got, "deploy") || slices.Contains(got, "search") {
		t.Fatalf("iso0 sees %v", got)
	}
	if got := toolNames(t, e.client, "iso1", nil); slices.Contains(got, "deploy") || !slices.Contains(got, "search") {
		t.Fatalf("iso1 sees %v", got)
	}
	wantText(t, call1(t, e.client, "iso1", "deploy", `{}`), "error", bus.CodeInactiveTool, inactiveDeploy)
}

func TestActivationSharedByRoutersAndSurvivesRestart(t *testing.T) {
	e := groupEnv(t, 2)
	if r := call1(t, e.client, "s1", "reset_tools", `{"ops": true}`); r.State != "success" {
		t.Fatal(textOf(r))
	}
	// Whichever router served it, stopping the first leaves the second to
	// serve the next call, which must see the activation.
	e.routers[0].Stop(t.Context())
	wantText(t, call1(t, e.client, "s1", "deploy", `{}`), "success", "", "deploy:")
	e.routers[1].Stop(t.Context())
	e.addRouter()
	e.routers = e.routers[2:]
	e.waitLive("deploy")
	wantText(t, call1(t, e.client, "s1", "deploy", `{}`), "success", "", "deploy:")
}

func TestConcurrentSessionUpdatesNeverLost(t *testing.T) {
	e := groupEnv(t, 2)
	// Store-level: many writers through two session stores of their own
	// (as two routers have) append distinct rules.
	stores := []*groups.Store{e.sessionStore(t), e.sessionStore(t)}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stores[i%2]
			_, err := st.Update(context.Background(), "cas", func(s *groups.Session) error {
				s.Rules = append(s.Rules, bus.Rule{Tool: fmt.Sprintf("t%d", i)})
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// Every router sees all of them (P.admin.session.get).
	get := func() *bus.Event {
		ev := newEvent(t, bus.TypeAdmin, struct{}{})
		ev.SessionID = "cas"
		return ev
	}
	e.everyRouter(t, get, e.client.Subjects().Admin("session.get"), func(ev *bus.Event) error {
		var view struct {
			State groups.Session `json:"state"`
		}
		if err := ev.DataAs(&view); err != nil {
			return fmt.Errorf("%s: %w", ev.Type, err)
		}
		if n := len(view.State.Rules); n != 20 {
			return fmt.Errorf("%s sees %d rules", ev.Source, n)
		}
		return nil
	})
	// Wire-level: concurrent reset_tools on one session; each succeeds and the
	// final state is exactly one of the requested sets.
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := []string{"ops", "web"}[i%2]
			if r := call1(t, e.client, "race", "reset_tools", `{"`+g+`": true}`); r.State != "success" {
				t.Error(textOf(r))
			}
		}()
	}
	wg.Wait()
	var v struct {
		State groups.Session `json:"state"`
	}
	if err := e.client.Admin(t.Context(), "session.get", "race", nil, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.State.Active) != 1 {
		t.Fatalf("active = %v, want exactly one group", v.State.Active)
	}
}

func TestExternalScopeGroup(t *testing.T) {
	e := groupEnv(t, 1)
	c := e.client
	wantText(t, call1(t, c, "s1", "audit", `{}`), "error", bus.CodeInactiveTool,
		"ToolGroupInactiveError: The tool 'audit' in group 'admin' is currently inactive. You should first activate the group by calling the 'reset_tools' tool.")
	// The model cannot switch it.
	if r := call1(t, c, "s1", "reset_tools", `{"admin": true}`); r.Error == nil || r.Error.Code != bus.CodeInvalidInput {
		t.Fatalf("reset_tools admin = %+v", r)
	}
	err := c.Admin(t.Context(), "session.activate", "s1", map[string]any{"groups": []string{"ops"}, "active": true}, nil)
	if !errors.Is(err, bus.ErrBadRequest) {
		t.Fatalf("activating a meta group by admin: %v", err)
	}
	if err := c.Admin(t.Context(), "session.activate", "s1", map[string]any{"groups": []string{"admin"}, "active": true}, nil); err != nil {
		t.Fatal(err)
	}
	wantText(t, call1(t, c, "s1", "audit", `{}`), "success", "", "audit:")
	if got := toolNames(t, c, "s1", nil); !slices.Contains(got, "audit") {
		t.Fatalf("tools = %v", got)
	}
	// reset_tools leaves external groups alone.
	call1(t, c, "s1", "reset_tools", `{}`)
	wantText(t, call1(t, c, "s1", "audit", `{}`), "success", "", "audit:")
	if err := c.Admin(t.Context(), "session.activate", "s1", map[string]any{"groups": []string{"admin"}, "active": false}, nil); err != nil {
		t.Fatal(err)
	}
	wantText(t, call1(t, c, "s1", "audit", `{}`), "error", bus.CodeInactiveTool,
		"ToolGroupInactiveError: The tool 'audit' in group 'admin' is currently inactive. You should first activate the group by calling the 'reset_tools' tool.")
	if err := c.Admin(t.Context(), "no.such.verb", "", nil, nil); !errors.Is(err, bus.ErrBadRequest) {
		t.Fatalf("unknown verb: %v", err)
	}
}

func TestConfigGroupsAndDefaults(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{Groups: []bus.Group{
		{Name: "files", Description: "File tools.", Scope: bus.ScopeMeta, ActiveByDefault: true},
		{Name: "net", Description: "Network tools.", Scope: bus.ScopeMeta},
	}})
	e.addWorker(func(w *worker.Worker) {
		_ = worker.Register(w, bus.ToolDef{Name: "ls", Groups: []string{"files"}, ReadOnly: true},
			func(context.Context, *worker.Call, textIn) (string, error) { return "a b", nil })
	})
	e.waitLive("ls")
	wantText(t, call1(t, e.client, "fresh", "ls", `{}`), "success", "", "a b")
	list, err := e.client.Tools(t.Context(), "fresh", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Groups) != 3 || !list.Groups[1].Active || list.Groups[2].Active {
		t.Fatalf("groups = %+v", list.Groups)
	}
}

func TestRequestScopedTools(t *testing.T) {
	e := groupEnv(t, 1)
	c := e.client
	pick := bus.ExternalTool{Name: "pick_file", Description: "Ask the user to pick a file.", InputSchema: json.RawMessage(`{"type":"object","properties":{"glob":{"type":"string"}}}`)}
	overDeploy := bus.ExternalTool{Name: "deploy", Description: "Client-side deploy.", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}

	t.Run("merge_external_priority", func(t *testing.T) {
		req := &bus.Request{ExternalTools: []bus.ExternalTool{pick, overDeploy}}
		if got, want := toolNames(t, c, "m1", req), []string{"echo", "reset_tools", "pick_file", "deploy"}; !slices.Equal(got, want) {
			t.Fatalf("tools = %v, want %v", got, want)
		}
		// The default mode is the same when merge_mode is absent or explicit.
		req2 := &bus.Request{MergeMode: bus.MergeExternalPriority, ExternalTools: []bus.ExternalTool{pick}}
		if got, want := toolNames(t, c, "m1", req2), []string{"echo", "reset_tools", "pick_file"}; !slices.Equal(got, want) {
			t.Fatalf("tools = %v, want %v", got, want)
		}
		// deploy is in an inactive group, yet the external one wins and parks.
		reply := callReq(t, c, "m1", req, "deploy", `{}`)
		if len(reply.Results) != 0 || len(reply.Parked) != 1 {
			t.Fatalf("reply = %+v", reply)
		}
		p := reply.Parked[0]
		if p.Kind != bus.KindExternal || p.Subject != "toolbus.answer.deploy" || p.ID != "c1" {
			t.Fatalf("parked = %+v", p)
		}
		// Input is validated against the request's schema.
		reply = callReq(t, c, "m1", req, "pick_file", `{"glob": 3}`)
		if len(reply.Results) != 1 || reply.Results[0].Error.Code != bus.CodeInvalidInput {
			t.Fatalf("reply = %+v", reply)
		}
		// The registry was not changed: without the request deploy is the backend's.
		wantText(t, call1(t, c, "m1", "deploy", `{}`), "error", bus.CodeInactiveTool, inactiveDeploy)
	})
	t.Run("external_only", func(t *testing.T) {
		req := &bus.Request{MergeMode: bus.MergeExternalOnly, ExternalTools: []bus.ExternalTool{pick}}
		if got, want := toolNames(t, c, "m2", req), []string{"pick_file"}; !slices.Equal(got, want) {
			t.Fatalf("tools = %v, want %v", got, want)
		}
		for _, name := range []string{"echo", "reset_tools"} {
			r := callReq(t, c, "m2", req, name, `{}`).Results[0]
			wantText(t, r, "error", bus.CodeUnknownTool, "ToolNotFoundError: The tool named '"+name+"' doesn't exist.")
		}
		if got := toolNames(t, c, "m2", nil); !slices.Contains(got, "echo") {
			t.Fatalf("other requests still see the backend: %v", got)
		}
	})
	t.Run("agent_only", func(t *testing.T) {
		req := &bus.Request{MergeMode: bus.MergeAgentOnly}
		if got, want := toolNames(t, c, "m3", req), []string{"echo", "reset_tools"}; !slices.Equal(got, want) {
			t.Fatalf("tools = %v, want %v", got, want)
		}
		bad := &bus.Request{MergeMode: bus.MergeAgentOnly, ExternalTools: []bus.ExternalTool{pick}}
		_, err := c.Call(t.Context(), "m3", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo"}}, Request: bad})
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || be.Message != "agent_only cannot include external tools" {
			t.Fatalf("err = %v", err)
		}
		if _, err := c.Tools(t.Context(), "m3", "", bad); !errors.Is(err, bus.ErrBadRequest) {
			t.Fatalf("tools err = %v", err)
		}
	})
	t.Run("invalid request", func(t *testing.T) {
		for _, req := range []*bus.Request{
			{MergeMode: "sometimes"},
			{ExternalTools: []bus.ExternalTool{{Name: "bad name", InputSchema: json.RawMessage(`{"type":"object"}`)}}},
			{ExternalTools: []bus.ExternalTool{{Name: "x", InputSchema: json.RawMessage(`{"type":"string"}`)}}},
			{ExternalTools: []bus.ExternalTool{pick, pick}},
		} {
			_, err := c.Call(t.Context(), "m4", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo"}}, Request: req})
			if !errors.Is(err, bus.ErrBadRequest) {
				t.Errorf("request %+v: err = %v", req, err)
			}
		}
	})
	t.Run("caller answers", func(t *testing.T) {
		req := &bus.Request{ExternalTools: []bus.ExternalTool{pick}}
		ev, err := c.Watch(t.Context(), "m5")
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Stop(t.Context())
		reply := callReq(t, c, "m5", req, "pick_file", `{"glob":"*.go"}`, client.WithReplyID("turn1"))
		if len(reply.Parked) != 1 {
			t.Fatalf("reply = %+v", reply)
		}
		if err := c.Parked().Answer(t.Context(), "pick_file", "m5", "turn1", "c1", bus.Answer{State: "success", Output: bus.Text("main.go")}); err != nil {
			t.Fatal(err)
		}
		done := nextEvent(t, ev, bus.TypeBatchDone)
		var bd bus.BatchDone
		_ = done.DataAs(&bd)
		if len(bd.Results) != 1 || textOf(bd.Results[0]) != "main.go" {
			t.Fatalf("batch.done = %s", done.Data)
		}
	})
}

// nextEvent returns the next event of type typ.
func nextEvent(t *testing.T, ev *client.Events, typ string) *bus.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-ev.C:
			if !ok {
				t.Fatalf("events closed before %s", typ)
			}
			if e.Type == typ {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event", typ)
		}
	}
}
