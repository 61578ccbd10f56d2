package facade

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
)

// draftGroup is a Group as the MCP grouping draft (SEP-2084) writes it.
type draftGroup struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Meta        map[string]any `json:"_meta"`
}

// groupsRequest sends one grouping request as the draft writes it and
// decodes {"groups": [...]}; a JSON-RPC error is returned as err text.
func groupsRequest(t *testing.T, c *mcpConn, id int64, method string, params any) ([]draftGroup, string) {
	t.Helper()
	resp, err := c.GetTransport().SendRequest(t.Context(), transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId(id), Method: method, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Error != nil {
		return nil, resp.Error.Message
	}
	var r struct {
		Groups []draftGroup `json:"groups"`
	}
	if err := json.Unmarshal(resp.Result, &r); err != nil {
		t.Fatalf("%s: %s: %v", method, resp.Result, err)
	}
	return r.Groups, ""
}

func activeOf(gs []draftGroup) map[string]bool {
	out := map[string]bool{}
	for _, g := range gs {
		a, _ := g.Meta[activeMetaKey].(bool)
		out[g.Name] = a
	}
	return out
}

// TestGroupsAsMCPGroups: a client written from the MCP grouping draft
// sees the extension in the server's capabilities, the session's groups
// in groups/list (basic, the meta group ops, the external group site,
// with whether each is active), each tool's groups in its _meta, and
// notifications/groups/list_changed when a group is switched through the
// bus or through toolbus/groups/activate, which has reset_tools'
// final-state semantics (issue 29).
func TestGroupsAsMCPGroups(t *testing.T) {
	e := newEnv(t)
	s := "grouping"
	c := e.connect(t, s, mcp.ProtocolVersion20251125, "alice")
	caps := c.GetServerCapabilities()
	if _, ok := caps.Experimental[groupingExtension]; !ok {
		t.Fatalf("capabilities without %s: %+v", groupingExtension, caps)
	}
	gs, msg := groupsRequest(t, c, 1001, methodGroupsList, nil)
	if msg != "" {
		t.Fatal(msg)
	}
	if got := activeOf(gs); len(got) != 3 || !got["basic"] || got["ops"] || got["site"] {
		t.Fatalf("groups/list: %+v", gs)
	}
	if slices.Contains(names(t, c), "deploy") {
		t.Fatal("deploy listed while ops is inactive")
	}

	// Activation through the extension: exactly ops active.
	gs, msg = groupsRequest(t, c, 1002, methodGroupsActivate, map[string]any{"groups": []string{"ops"}})
	if msg != "" {
		t.Fatal(msg)
	}
	if !activeOf(gs)["ops"] {
		t.Fatalf("after activating ops: %+v", gs)
	}
	testkit.Recv(t, c.groups, bound, "notifications/groups/list_changed")
	waitChanged(t, c)
	tools, err := c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tl := range tools.Tools {
		if tl.Name == "deploy" {
			found = true
			raw, _ := json.Marshal(tl)
			var m struct {
				Meta map[string][]string `json:"_meta"`
			}
			if json.Unmarshal(raw, &m) != nil || !slices.Equal(m.Meta["io.modelcontextprotocol/groups"], []string{"ops"}) {
				t.Fatalf("deploy's _meta: %s", raw)
			}
		}
	}
	if !found {
		t.Fatal("deploy not listed after ops was activated")
	}

	// Final state: an empty list deactivates ops (as reset_tools {}).
	if gs, msg = groupsRequest(t, c, 1003, methodGroupsActivate, map[string]any{"groups": []string{}}); msg != "" || activeOf(gs)["ops"] {
		t.Fatalf("after activating none: %+v %s", gs, msg)
	}
	testkit.Recv(t, c.groups, bound, "notifications/groups/list_changed")

	// Through the bus: the hosts hear it too.
	e.resetTools(t, s, map[string]bool{"ops": true})
	testkit.Recv(t, c.groups, bound, "notifications/groups/list_changed after reset_tools on the bus")

	// Bad activations change nothing.
	for i, p := range []any{nil, map[string]any{}, map[string]any{"groups": "ops"}, map[string]any{"groups": []string{"no such group!"}}} {
		if _, msg := groupsRequest(t, c, int64(1010+i), methodGroupsActivate, p); msg == "" {
			t.Errorf("%v accepted", p)
		}
	}
	if gs, _ := groupsRequest(t, c, 1020, methodGroupsList, nil); !activeOf(gs)["ops"] {
		t.Fatalf("a refused activation changed the groups: %+v", gs)
	}
}

// TestGroupsOverStdio: the grouping extension over stdio (`toolbus
// mcp`), as over HTTP: the capability, groups/list, activation with its
// notification, and the notification for reset_tools on the bus.
func TestGroupsOverStdio(t *testing.T) {
	e := newEnv(t)
	s := "grouping-stdio"
	c := e.stdioClient(t, s, "alice")
	c.groups = make(chan struct{}, 16)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == notifyGroupsChanged {
			select {
			case c.groups <- struct{}{}:
			default:
			}
		}
	})
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	init, err := c.Initialize(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := init.Capabilities.Experimental[groupingExtension]; !ok {
		t.Fatalf("stdio capabilities without %s: %+v", groupingExtension, init.Capabilities)
	}
	gs, msg := groupsRequest(t, c, 2001, methodGroupsList, nil)
	if msg != "" {
		t.Fatal(msg)
	}
	if got := activeOf(gs); len(got) != 3 || !got["basic"] || got["ops"] {
		t.Fatalf("groups/list over stdio: %+v", gs)
	}
	if gs, msg = groupsRequest(t, c, 2002, methodGroupsActivate, map[string]any{"groups": []string{"ops"}}); msg != "" || !activeOf(gs)["ops"] {
		t.Fatalf("activate over stdio: %+v %s", gs, msg)
	}
	testkit.Recv(t, c.groups, bound, "notifications/groups/list_changed over stdio")
	if !slices.Contains(names(t, c), "deploy") {
		t.Fatal("deploy not listed after ops was activated over stdio")
	}
	e.resetTools(t, s, map[string]bool{})
	testkit.Recv(t, c.groups, bound, "notifications/groups/list_changed after reset_tools on the bus")
	if _, msg := groupsRequest(t, c, 2003, methodGroupsActivate, map[string]any{"groups": "ops"}); msg == "" {
		t.Fatal("a malformed activation was accepted over stdio")
	}
}
