package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
)

// The MCP grouping draft (SEP-2084, extension
// io.modelcontextprotocol/grouping) served from the session's groups
// (docs/mcp.md "Groups as MCP groups").
const (
	groupingExtension = "io.modelcontextprotocol/grouping"
	methodGroupsList  = "groups/list"
	// methodGroupsActivate is toolbus's own (the draft has no activation):
	// the final set of active groups, reset_tools' semantics.
	methodGroupsActivate = "toolbus/groups/activate"
	notifyGroupsChanged  = "notifications/groups/list_changed"
	// Each group's _meta says whether it is active, and its scope.
	activeMetaKey = "io.toolbus/active"
	scopeMetaKey  = "io.toolbus/scope"
	// maxActivate bounds the groups one activation names.
	maxActivate = 256
)

// groupingCapability is the extension's capability, served experimental
// (as the draft's TypeScript SDK registers it) and as an extension.
func groupingCapability() map[string]any {
	return map[string]any{groupingExtension: map[string]any{"listChanged": true}}
}

type mcpGroup struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Meta        map[string]any `json:"_meta"`
}

func groupsOf(gs []bus.GroupInfo) []mcpGroup {
	out := make([]mcpGroup, 0, len(gs))
	for _, g := range gs {
		out = append(out, mcpGroup{Name: g.Name, Description: g.Description,
			Meta: map[string]any{activeMetaKey: g.Active, scopeMetaKey: g.Scope}})
	}
	return out
}

// groupsChanged records the session's groups and tells its hosts when
// they changed since the last listing. Called with s.mu held.
func (s *session) groupsChanged(gs []bus.GroupInfo) {
	raw, _ := json.Marshal(gs)
	if string(raw) == s.groups {
		return
	}
	first := s.groups == ""
	s.groups = string(raw)
	if !first && s.mcp != nil {
		s.mcp.SendNotificationToAllClients(notifyGroupsChanged, nil)
	}
}

// serveOwn answers over HTTP what the facade answers itself (take);
// false leaves the request, body intact, to the next handler. A task
// message of an MCP session carries its id, for the task's status
// notifications.
func (s *session) serveOwn(w http.ResponseWriter, r *http.Request) bool {
	body, ok := postedBody(r)
	if !ok {
		return false
	}
	m, answer, ok := s.take(body)
	if !ok {
		return false
	}
	ctx := context.WithValue(r.Context(), contextKey, r.Header.Get(s.f.cfg.ContextHeader))
	sid := r.Header.Get(server.HeaderKeySessionID)
	if sid != "" && !mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion)) {
		ctx = context.WithValue(ctx, notifySessionKey{}, sid)
	}
	if m.Method == methodSubscriptionsListen {
		serveStream(ctx, w, m, s.tasks.answer) // tasks_store.go
		return true
	}
	out := answer(ctx)
	w.Header().Set("Content-Type", "application/json")
	if sid != "" {
		w.Header().Set(server.HeaderKeySessionID, sid)
	}
	_, _ = w.Write(out)
	return true
}

// groupsAnswer answers a grouping request with its JSON-RPC response.
func (s *session) groupsAnswer(ctx context.Context, m *rpcMessage) []byte {
	if m.Method == methodGroupsActivate {
		if rerr := s.activate(ctx, m.Params); rerr != nil {
			return response(m.ID, nil, rerr)
		}
	}
	list, err := s.f.list(ctx, s.id, s.user, bus.FormatMCP)
	if err != nil {
		return response(m.ID, nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error()})
	}
	return response(m.ID, map[string]any{"groups": groupsOf(list.Groups)}, nil)
}

// take takes a message the facade answers itself (a grouping request, or
// a task message when the session offers tasks) and returns how it is
// answered; false passes it on to mcp-go.
func (s *session) take(line []byte) (*rpcMessage, func(context.Context) []byte, bool) {
	m, ok := parseRequest(line)
	switch {
	case !ok:
	case m.Method == methodGroupsList || m.Method == methodGroupsActivate:
		return m, func(ctx context.Context) []byte { return s.groupsAnswer(ctx, m) }, true
	case !s.noTasks && isTaskMessage(m):
		return m, func(ctx context.Context) []byte { return s.tasks.answer(ctx, m) }, true
	}
	return nil, nil, false
}

// activate makes exactly the named groups the active switchable ones: a
// call of reset_tools on the bus as the session's user.
func (s *session) activate(ctx context.Context, params json.RawMessage) *rpcError {
	var p struct {
		Groups []string `json:"groups"`
	}
	if len(params) == 0 || json.Unmarshal(params, &p) != nil || p.Groups == nil {
		return &rpcError{Code: mcp.INVALID_PARAMS, Message: `toolbus/groups/activate: params must be {"groups": [names]}: the groups to be active, every other switchable group inactive`}
	}
	if len(p.Groups) > maxActivate {
		return &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("toolbus/groups/activate: at most %d groups", maxActivate)}
	}
	args := map[string]any{}
	for _, g := range p.Groups {
		if !bus.ValidID(g) {
			return &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("toolbus/groups/activate: %q is not a group name", g)}
		}
		args[g] = true
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = groups.ResetTools
	req.Params.Arguments = args
	res, err := s.calls.run(ctx, req, runOpts{})
	if err != nil {
		return &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error()}
	}
	if res.IsError {
		var texts []string
		for _, c := range res.Content {
			if t, ok := c.(mcp.TextContent); ok {
				texts = append(texts, t.Text)
			}
		}
		return &rpcError{Code: mcp.INVALID_PARAMS, Message: "toolbus/groups/activate: " + strings.Join(texts, " ")}
	}
	return nil
}
