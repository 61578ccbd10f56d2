package facade

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/mcp/mcptest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/worker"
)

const bound = 15 * time.Second

type env struct {
	d       *xtest.Deployment
	bus     *client.Client
	url     string
	f       *Facade
	release chan struct{} // ends the slow tool's run
}

// conn connects to the deployment (on a cluster, to the nodes in turn).
func (e *env) conn(t *testing.T, role string) *nats.Conn {
	t.Helper()
	nc, err := e.d.Connect(t.Context(), role)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// newEnv starts a router, a worker and the facade over HTTP on one
// nats-server. The facade polls once an hour, so every list change the
// tests see came from a watch.
func newEnv(t *testing.T) *env { return startEnv(t, false, nil) }

// newClusterEnv is newEnv on a 3-node cluster with every bucket
// replicated three times, the router, the worker, the agent and the
// facade on different nodes.
func newClusterEnv(t *testing.T) *env { return startEnv(t, true, nil) }

// startEnv starts the deployment and the facade, whose Config (insecure,
// host_user) mod may change first.
func startEnv(t *testing.T, cluster bool, mod func(*Config)) *env {
	t.Helper()
	return startEnvRouters(t, cluster, 1, mod)
}

// startEnvRouters is startEnv with routers routers.
func startEnvRouters(t *testing.T, cluster bool, routers int, mod func(*Config)) *env {
	t.Helper()
	e := &env{release: make(chan struct{})}
	e.d = xtest.Run(t, xtest.Config{Cluster: cluster, Routers: routers, Heartbeat: 2 * time.Second,
		Router: router.Config{DefaultMode: "bypass", Logger: slog.New(slog.DiscardHandler),
			Groups: []bus.Group{{Name: "ops", Description: "Operations.", Scope: bus.ScopeMeta},
				{Name: "site", Description: "Site tools an operator switches.", Scope: bus.ScopeExternal}}}})
	type hi struct {
		Name string `json:"name"`
	}
	setup := func(w *worker.Worker) error {
		return errors.Join(
			worker.Register(w, bus.ToolDef{Name: "hello", Description: "Greets.", ReadOnly: true},
				func(_ context.Context, _ *worker.Call, in hi) (string, error) { return "hello " + in.Name, nil }),
			worker.Register(w, bus.ToolDef{Name: "whoami", Description: "The batch's user, as the worker sees it.", ReadOnly: true},
				func(_ context.Context, c *worker.Call, _ struct{}) (string, error) {
					return "user " + c.UserString(), nil
				}),
			worker.Register(w, bus.ToolDef{Name: "deploy", Description: "Deploys.", Groups: []string{"ops"}},
				func(context.Context, *worker.Call, struct{}) (string, error) { return "deployed", nil }),
			worker.Register(w, bus.ToolDef{Name: "slow", Description: "Reports progress, then ends when released.", ReadOnly: true},
				func(ctx context.Context, c *worker.Call, _ struct{}) (string, error) {
					if err := c.Progress(bus.Text("half way")...); err != nil {
						return "", err
					}
					select {
					case <-e.release:
						return "slow done", nil
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}),
			worker.Register(w, bus.ToolDef{Name: "siteops", Description: "Site operations.", ReadOnly: true, Groups: []string{"site"}},
				func(context.Context, *worker.Call, struct{}) (string, error) { return "site", nil }),
			w.Handle(bus.ToolDef{Name: "ask_human", Description: "A person answers.", External: true,
				InputSchema: json.RawMessage(`{"type":"object"}`)}, nil),
			w.Handle(bus.ToolDef{Name: "ask_soon", Description: "A person answers within 1.5 s.", External: true, TimeoutMS: 1500,
				InputSchema: json.RawMessage(`{"type":"object"}`)}, nil))
	}
	if _, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: setup}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.WaitLive(t.Context(), "hello", "whoami", "deploy", "slow", "siteops", "ask_human", "ask_soon"); err != nil {
		t.Fatal(err)
	}
	e.bus = client.New(e.conn(t, xtest.RoleClient), client.Config{Source: "test/agent"})
	cfg := Config{Poll: time.Hour, ProgressEvery: 200 * time.Millisecond, Insecure: true, Confirm: ConfirmHostUser}
	if mod != nil {
		mod(&cfg)
	}
	e.f = New(client.New(e.conn(t, "facade"), client.Config{Source: "toolbus/mcp"}), cfg)
	hs := httptest.NewServer(e.f.Handler())
	t.Cleanup(func() { hs.Close(); e.f.Drain(testkit.StopContext(t)) })
	e.url = hs.URL
	return e
}

// extraWorker starts a worker with the tool extra.
func (e *env) extraWorker(t *testing.T) *worker.Worker {
	t.Helper()
	w, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "extra", Description: "Extra.", ReadOnly: true},
			func(context.Context, *worker.Call, struct{}) (string, error) { return "extra", nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// resetTools runs reset_tools in session s through the bus.
func (e *env) resetTools(t *testing.T, s string, groups map[string]bool) {
	t.Helper()
	if _, err := e.bus.Call(t.Context(), s, bus.Batch{Calls: []bus.Call{{ID: "r-" + nuid.Next(), Name: "reset_tools", Input: client.Input(groups)}}}); err != nil {
		t.Fatal(err)
	}
}

// answeredWhileWaiting calls ask_human through c and answers the park on
// the bus while the MCP call waits.
func (e *env) answeredWhileWaiting(t *testing.T, c *mcpConn, s string) {
	t.Helper()
	r := e.answerWhileWaiting(t, c, s, "ask_human", bus.Answer{State: bus.StateSuccess, Output: bus.Text("forty-two")})
	if r == nil || r.IsError || textOf(r) != "forty-two" {
		t.Fatalf("parked call: %+v", r)
	}
}

// answerWhileWaiting calls tool through c, answers its park on the bus
// with a while the MCP call waits, and returns the call's MCP result.
func (e *env) answerWhileWaiting(t *testing.T, c *mcpConn, s, tool string, a bus.Answer) *mcp.CallToolResult {
	t.Helper()
	ev, err := e.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	res := make(chan *mcp.CallToolResult, 1)
	go func() {
		r, _ := call(t, c, tool, map[string]any{}, false)
		res <- r
	}()
	replyID, p := parkedEvent(t, ev, tool)
	if err := e.bus.Parked().Answer(t.Context(), tool, s, replyID, p.ID, a); err != nil {
		t.Fatal(err)
	}
	return testkit.Recv(t, res, bound, "the tools/call result")
}

// workerComesAndGoes starts a worker with the tool extra, then drains it:
// each reaches c as tools/list_changed, the next list changed.
func (e *env) workerComesAndGoes(t *testing.T, c *mcpConn) {
	t.Helper()
	if got := names(t, c); slices.Contains(got, "extra") {
		t.Fatalf("before: %v", got)
	}
	w := e.extraWorker(t)
	waitChanged(t, c)
	if got := names(t, c); !slices.Contains(got, "extra") {
		t.Fatalf("after the worker registered: %v", got)
	}
	if err := w.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, c)
	if got := names(t, c); slices.Contains(got, "extra") {
		t.Fatalf("after the worker left: %v", got)
	}
}

// mcpConn is an mcp-go client of one session with the notifications it got.
type mcpConn struct {
	*mcpclient.Client
	changed  chan struct{}
	progress chan string
	groups   chan struct{} // notifications/groups/list_changed (groups_test.go)
}

// connect returns an mcp-go client of session s that speaks version,
// initialised (2026-07-28: discovered, and listening for list changes).
func (e *env) connect(t *testing.T, s, version, user string, opts ...mcpclient.ClientOption) *mcpConn {
	t.Helper()
	return e.connectHeaders(t, s, version, map[string]string{"X-Toolbus-User": user}, opts...)
}

// connectHeaders is connect with the HTTP headers of every request.
func (e *env) connectHeaders(t *testing.T, s, version string, headers map[string]string, opts ...mcpclient.ClientOption) *mcpConn {
	t.Helper()
	modern := mcp.IsModernProtocol(version)
	topts := []transport.StreamableHTTPCOption{transport.WithHTTPHeaders(headers),
		transport.WithHTTPLogger(slog.New(slog.DiscardHandler))}
	if !modern {
		topts = append(topts, transport.WithContinuousListening())
		opts = append(opts, mcpclient.WithLegacyProtocolOnly())
	}
	tr, err := transport.NewStreamableHTTP(e.url+"/mcp/"+s, topts...)
	if err != nil {
		t.Fatal(err)
	}
	c := &mcpConn{Client: mcpclient.NewClient(tr, opts...), changed: make(chan struct{}, 16), progress: make(chan string, 64),
		groups: make(chan struct{}, 16)}
	acked := make(chan struct{}, 1)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		switch n.Method {
		case string(mcp.MethodNotificationToolsListChanged):
			c.changed <- struct{}{}
		case notifyGroupsChanged:
			select {
			case c.groups <- struct{}{}:
			default:
			}
		case string(mcp.MethodNotificationSubscriptionsAcknowledged):
			acked <- struct{}{}
		case string(mcp.MethodNotificationProgress):
			msg, _ := n.Params.AdditionalFields["message"].(string)
			c.progress <- msg
		}
	})
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	res, err := c.Initialize(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProtocolVersion != version {
		t.Fatalf("negotiated %s, want %s", res.ProtocolVersion, version)
	}
	if modern {
		stop, err := c.ListenAsync(t.Context(), mcp.SubscriptionFilter{ToolsListChanged: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		testkit.Recv(t, acked, bound, "subscriptions/acknowledged")
	}
	return c
}

func names(t *testing.T, c *mcpConn) []string {
	t.Helper()
	res, err := c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tool := range res.Tools {
		out = append(out, tool.Name)
	}
	return out
}

func busNames(t *testing.T, e *env, s, user string) []string {
	t.Helper()
	list, err := e.f.list(t.Context(), s, user, bus.FormatMCP)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, raw := range list.Tools {
		var l struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(raw, &l)
		out = append(out, l.Name)
	}
	return out
}

func call(t *testing.T, c *mcpConn, name string, args map[string]any, progress bool) (*mcp.CallToolResult, error) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	if progress {
		req.Params.Meta = &mcp.Meta{ProgressToken: "p-" + name}
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	return c.CallTool(ctx, req)
}

func textOf(r *mcp.CallToolResult) string {
	s := ""
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			s += tc.Text
		}
	}
	return s
}

// waitChanged waits for a tools/list_changed within the contract's 2 s.
func waitChanged(t *testing.T, c *mcpConn) {
	t.Helper()
	select {
	case <-c.changed:
	case <-time.After(2 * time.Second):
		t.Fatal("no tools/list_changed within 2s")
	}
}

// parkedEvent is mcptest.ParkedEvent within bound.
func parkedEvent(t *testing.T, ev *client.Events, tool string) (replyID string, p bus.Parked) {
	t.Helper()
	return mcptest.ParkedEvent(t, ev, tool, bound)
}

// revisions are every protocol revision mcp-go speaks.
var revisions = []string{mcp.ProtocolVersion20241105, mcp.ProtocolVersion20250326, mcp.ProtocolVersion20250618,
	mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728}

func TestHTTP(t *testing.T) {
	if !slices.Equal(revisions, slices.Sorted(slices.Values(mcp.ValidProtocolVersions))) {
		t.Fatalf("mcp-go speaks %v; test them all", mcp.ValidProtocolVersions)
	}
	e := newEnv(t)
	for _, version := range revisions {
		t.Run(version, func(t *testing.T) {
			s := "s" + strings.ReplaceAll(version, "-", "")
			c := e.connect(t, s, version, "alice")
			got, want := names(t, c), busNames(t, e, s, "alice")
			if !slices.Equal(got, want) || !slices.Contains(got, "hello") || slices.Contains(got, "deploy") {
				t.Fatalf("tools/list %v, bus %v", got, want)
			}
			if r, err := call(t, c, "hello", map[string]any{"name": "bob"}, false); err != nil || r.IsError || textOf(r) != "hello bob" {
				t.Fatalf("hello: %+v %v", r, err)
			}
			if r, err := call(t, c, "hello", map[string]any{"name": 3}, false); err != nil || !r.IsError || textOf(r) == "" {
				t.Fatalf("validation: %+v %v", r, err)
			}
			if _, err := call(t, c, "deploy", nil, false); err == nil {
				t.Fatal("a tool outside the session's view was called")
			}

			// reset_tools through the bus: the MCP client is told.
			e.resetTools(t, s, map[string]bool{"ops": true})
			waitChanged(t, c)
			if got := names(t, c); !slices.Contains(got, "deploy") {
				t.Fatalf("after reset_tools through the bus: %v", got)
			}
			if r, err := call(t, c, "deploy", nil, false); err != nil || textOf(r) != "deployed" {
				t.Fatalf("deploy: %+v %v", r, err)
			}
			// reset_tools through MCP.
			if r, err := call(t, c, "reset_tools", map[string]any{"ops": false}, false); err != nil || r.IsError {
				t.Fatalf("reset_tools: %+v %v", r, err)
			}
			waitChanged(t, c)
			if got := names(t, c); slices.Contains(got, "deploy") {
				t.Fatalf("after reset_tools through MCP: %v", got)
			}
			// An operator's session.activate.
			if err := e.bus.Admin(t.Context(), "session.activate", s, map[string]any{"groups": []string{"site"}}, nil); err != nil {
				t.Fatal(err)
			}
			waitChanged(t, c)
			if got := names(t, c); !slices.Contains(got, "siteops") {
				t.Fatalf("after session.activate: %v", got)
			}

			// A parked external call answered while the MCP call waits.
			e.answeredWhileWaiting(t, c, s)
		})
	}
	resp, err := http.Get(e.url + "/mcp/bad.session")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("invalid session: HTTP %d", resp.StatusCode)
	}
}

// stdioClient starts an mcp-go client over pipes to the facade's
// ServeStdio for session and user, stopped when the test ends.
func (e *env) stdioClient(t *testing.T, session, user string) *mcpConn {
	t.Helper()
	cin, sout := io.Pipe() // server → client
	sin, cout := io.Pipe() // client → server
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- e.f.ServeStdio(ctx, session, user, sin, sout) }()
	t.Cleanup(func() {
		cancel()
		_ = cout.Close()
		_ = sout.Close()
		<-served
	})
	c := &mcpConn{Client: mcpclient.NewClient(transport.NewIO(cin, cout, io.NopCloser(strings.NewReader(""))))}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStdio(t *testing.T) {
	e := newEnv(t)
	c := e.stdioClient(t, "stdio1", "alice")
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	init, err := c.Initialize(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	// Over stdio tasks are offered as over HTTP (issue 18).
	if init.Capabilities.Tasks == nil {
		t.Fatal("stdio offers no tasks")
	}
	if got, want := names(t, c), busNames(t, e, "stdio1", "alice"); !slices.Equal(got, want) {
		t.Fatalf("tools/list %v, bus %v", got, want)
	}
	if r, err := call(t, c, "hello", map[string]any{"name": "eve"}, false); err != nil || textOf(r) != "hello eve" {
		t.Fatalf("hello: %+v %v", r, err)
	}
	if _, err := call(t, c, "deploy", nil, false); err == nil {
		t.Fatal("a tool outside the session's view was called")
	}
	// A task over stdio runs on after its tools/call returned, to its
	// end (it used to be cancelled at once: client: watch: context canceled).
	ev, err := e.bus.Watch(t.Context(), "stdio1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	id := startTaskOn(t, c, "ask_human")
	replyID, p := parkedEvent(t, ev, "ask_human")
	if err := e.bus.Parked().Answer(t.Context(), "ask_human", "stdio1", replyID, p.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("over stdio")}); err != nil {
		t.Fatal(err)
	}
	if r := waitTask(t, c, id); r.IsError || len(r.Content) != 1 || r.Content[0].(mcp.TextContent).Text != "over stdio" {
		t.Fatalf("stdio task result %+v", r)
	}
}

// startTaskOn sends a task-augmented tools/call of tool on c's transport
// (mcp-go's client has no call for it) and returns the task id.
func startTaskOn(t *testing.T, c *mcpConn, tool string) string {
	t.Helper()
	resp, err := c.GetTransport().SendRequest(t.Context(), transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION,
		ID: mcp.NewRequestId("task-" + nuid.Next()), Method: string(mcp.MethodToolsCall),
		Params: map[string]any{"name": tool, "arguments": map[string]any{}, "task": map[string]any{}}})
	if err != nil || resp.Error != nil {
		t.Fatalf("task call: %v %+v", err, resp.Error)
	}
	var created mcp.CreateTaskResult
	if err := json.Unmarshal(resp.Result, &created); err != nil || created.Task.TaskId == "" {
		t.Fatalf("create task: %s %v", resp.Result, err)
	}
	return created.Task.TaskId
}

// waitTask polls task id through c until completed and returns its result.
func waitTask(t *testing.T, c *mcpConn, id string) *mcp.TaskResultResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	st, err := c.WaitForTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}}, 50*time.Millisecond)
	if err != nil || st.Status != mcp.TaskStatusCompleted {
		t.Fatalf("task %s: %+v %v", id, st, err)
	}
	res, err := c.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: id}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// elicitor is a host's user who answers every confirmation with decision,
// or, with hold, not before the elicitation's context ends or release.
type elicitor struct {
	mu       sync.Mutex
	decision string
	hold     chan struct{}
	asked    chan string
}

func (el *elicitor) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	el.asked <- req.Params.Message
	el.mu.Lock()
	decision, hold := el.decision, el.hold
	el.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"decision": decision}}}, nil
}

func (el *elicitor) set(decision string, hold chan struct{}) {
	el.mu.Lock()
	defer el.mu.Unlock()
	el.decision, el.hold = decision, hold
}

// A confirmation goes to the host's user through elicitation: a
// server-initiated request up to 2025-11-25, an input_required result and
// a retry (multi round-trip) in 2026-07-28.
func TestElicitation(t *testing.T) {
	e := newEnv(t)
	for _, version := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		t.Run(version, func(t *testing.T) {
			s := "elicit" + strings.ReplaceAll(version, "-", "")
			if err := e.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
				t.Fatal(err)
			}
			e.resetTools(t, s, map[string]bool{"ops": true})
			el := &elicitor{decision: choiceAllow, asked: make(chan string, 4)}
			c := e.connect(t, s, version, "alice", mcpclient.WithElicitationHandler(el))
			// Elicitation is the client's capability: the server never
			// lists it, yet asks (issue 29, F4).
			if caps := c.GetServerCapabilities(); caps.Elicitation != nil {
				t.Fatalf("the facade lists elicitation among its capabilities: %+v", caps.Elicitation)
			}
			r, err := call(t, c, "deploy", map[string]any{}, false)
			if err != nil || r.IsError || textOf(r) != "deployed" {
				t.Fatalf("confirmed through elicitation: %+v %v", r, err)
			}
			if msg := <-el.asked; !strings.Contains(msg, "deploy") {
				t.Fatalf("elicitation message %q", msg)
			}
			el.set(choiceDeny, nil)
			r, err = call(t, c, "deploy", map[string]any{}, false)
			if err != nil || !r.IsError || !strings.Contains(textOf(r), "denied") {
				t.Fatalf("denied through elicitation: %+v %v", r, err)
			}
			<-el.asked

			// The host's user is asked and does not answer; toolbus
			// confirm (an approver on the bus) answers first and wins. The
			// user's later deny changes nothing.
			hold := make(chan struct{})
			el.set(choiceDeny, hold)
			ev, err := e.bus.Watch(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Stop(t.Context())
			res := make(chan *mcp.CallToolResult, 1)
			go func() {
				r, _ := call(t, c, "deploy", map[string]any{}, false)
				res <- r
			}()
			replyID, p := parkedEvent(t, ev, "deploy")
			testkit.Recv(t, el.asked, bound, "the elicitation")
			yes := true
			if err := e.bus.Parked().Answer(t.Context(), "deploy", s, replyID, p.ID, bus.Answer{Confirmed: &yes}); err != nil {
				t.Fatal(err)
			}
			if version == mcp.ProtocolVersion20260728 {
				// The call waits for the client's retry, which the user's
				// late answer sends.
				close(hold)
				hold = nil
			}
			if r := testkit.Recv(t, res, bound, "the tools/call result"); r == nil || r.IsError || textOf(r) != "deployed" {
				t.Fatalf("confirmed through the bus while the host was asked: %+v", r)
			}
			if hold != nil {
				close(hold)
			}

			// Allow and remember: a rule allows deploy from now on.
			el.set(choiceAllowAlways, nil)
			if r, err := call(t, c, "deploy", map[string]any{}, false); err != nil || r.IsError || textOf(r) != "deployed" {
				t.Fatalf("allowed and remembered: %+v %v", r, err)
			}
			<-el.asked
			if r, err := call(t, c, "deploy", map[string]any{}, false); err != nil || r.IsError || textOf(r) != "deployed" {
				t.Fatalf("after allow and remember: %+v %v", r, err)
			}
			if len(el.asked) != 0 {
				t.Fatal("asked again after allow and remember")
			}
		})
	}
}

func TestParkDeadline(t *testing.T) {
	e := newEnv(t)
	c := e.connect(t, "late", mcp.ProtocolVersion20251125, "alice")
	start := time.Now()
	r, err := call(t, c, "ask_soon", map[string]any{}, true)
	if err != nil || !r.IsError || !strings.Contains(textOf(r), "still parked") || !strings.Contains(textOf(r), "toolbus.answer.ask_soon") {
		t.Fatalf("parked past the deadline: %+v %v", r, err)
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("gave up after %s, before the tool's timeout_ms 1500", d)
	}
	// Progress while parked: the park, then every ProgressEvery.
	if n := len(c.progress); n < 3 {
		t.Fatalf("%d progress notifications while parked 1.5 s, want at least 3", n)
	}
	if msg := <-c.progress; !strings.Contains(msg, "waiting for an answer on toolbus.answer.ask_soon") {
		t.Fatalf("first progress %q", msg)
	}
}

// TestQuietHostStillParked: a host that sent no progress token (and runs
// no task) is answered before its own timeout with an error result saying
// the call is still parked and how it goes on; the call stays parked on
// the bus and an answer completes it there.
func TestQuietHostStillParked(t *testing.T) {
	e := startEnv(t, false, func(c *Config) { c.QuietHold = 300 * time.Millisecond })
	c := e.connect(t, "quiet", mcp.ProtocolVersion20251125, "alice")
	events, err := e.bus.Watch(t.Context(), "quiet")
	if err != nil {
		t.Fatal(err)
	}
	defer events.Stop(t.Context())
	r, err := call(t, c, "ask_human", map[string]any{}, false)
	if err != nil || !r.IsError || !strings.Contains(textOf(r), "stays parked on the bus") || !strings.Contains(textOf(r), "toolbus.answer.ask_human") {
		t.Fatalf("quiet host: %+v %v", r, err)
	}
	var parked struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := e.bus.Admin(t.Context(), "parked.list", "quiet", nil, &parked); err != nil || len(parked.Parked) != 1 {
		t.Fatalf("parked.list: %+v %v", parked, err)
	}
	p := parked.Parked[0]
	if err := e.bus.Parked().Answer(t.Context(), "ask_human", "quiet", p.ReplyID, p.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("later")}); err != nil {
		t.Fatal(err)
	}
	for ev := range events.C {
		var res bus.Result
		if ev.Type == bus.TypeCallResult && ev.DataAs(&res) == nil && res.ID == p.ID {
			if res.State != bus.StateSuccess {
				t.Fatalf("the parked call ended %+v", res)
			}
			return
		}
	}
	t.Fatal("no result for the parked call")
}

func TestProgress(t *testing.T) {
	e := newEnv(t)
	c := e.connect(t, "prog", mcp.ProtocolVersion20251125, "alice")
	res := make(chan *mcp.CallToolResult, 1)
	go func() {
		r, _ := call(t, c, "slow", map[string]any{}, true)
		res <- r
	}()
	if msg := testkit.Recv(t, c.progress, bound, "a progress notification"); msg != "half way" {
		t.Fatalf("progress %q", msg)
	}
	close(e.release)
	if r := testkit.Recv(t, res, bound, "the tools/call result"); r == nil || r.IsError || textOf(r) != "slow done" {
		t.Fatalf("slow: %+v", r)
	}
}

// A task-augmented call that parks is a task the client polls; it ends
// with the call's result once answered, or with the still-parked error at
// its deadline.
func TestTask(t *testing.T) {
	e := newEnv(t)
	// Tasks came with 2025-11-25. mcp-go's client sends tasks/get and
	// tasks/result without the metadata 2026-07-28 requires; the facade
	// answers them all the same (tasks.go).
	for _, version := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		s := "tasks" + strings.ReplaceAll(version, "-", "")
		c := e.connect(t, s, version, "alice")
		if caps := c.GetServerCapabilities(); caps.Tasks == nil {
			t.Fatalf("no tasks capability: %+v", caps)
		}
		ev, err := e.bus.Watch(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Stop(t.Context())
		id := startTaskOn(t, c, "ask_human")
		replyID, p := parkedEvent(t, ev, "ask_human")
		st, err := c.GetTask(t.Context(), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}})
		if err != nil || st.Status != mcp.TaskStatusWorking {
			t.Fatalf("parked task: %+v %v", st, err)
		}
		if err := e.bus.Parked().Answer(t.Context(), "ask_human", s, replyID, p.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("answered")}); err != nil {
			t.Fatal(err)
		}
		if r := waitTask(t, c, id); r.IsError || len(r.Content) != 1 || r.Content[0].(mcp.TextContent).Text != "answered" {
			t.Fatalf("task result %+v", r)
		}
		// tasks/cancel cancels the parked call on the bus.
		id = startTaskOn(t, c, "ask_human")
		_, p = parkedEvent(t, ev, "ask_human")
		if _, err := c.CancelTask(t.Context(), mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: id}}); err != nil {
			t.Fatal(err)
		}
		for ended := false; !ended; {
			m := testkit.Recv(t, ev.C, bound, "the cancelled call's result")
			var r bus.Result
			if m.Type == bus.TypeCallResult && m.DataAs(&r) == nil && r.ID == p.ID {
				if r.State != bus.StateInterrupted {
					t.Fatalf("after tasks/cancel: %+v", r)
				}
				ended = true
			}
		}
		id = startTaskOn(t, c, "ask_soon")
		if r := waitTask(t, c, id); !r.IsError || !strings.Contains(r.Content[0].(mcp.TextContent).Text, "still parked") {
			t.Fatalf("task past its deadline %+v", r)
		}
	}
}

// A worker registering or withdrawing tools reaches MCP clients as
// tools/list_changed, the next list changed accordingly.
func TestWorkerListChanged(t *testing.T) {
	e := newEnv(t)
	e.workerComesAndGoes(t, e.connect(t, "workers", mcp.ProtocolVersion20251125, "alice"))
}

// tools/list is the listing of the request's user: a skill scoped to
// alice lists the skill loader for her and not for bob.
func TestUserListing(t *testing.T) {
	e := newEnv(t)
	const s = "users"
	alice := e.connect(t, s, mcp.ProtocolVersion20251125, "alice")
	bob := e.connect(t, s, mcp.ProtocolVersion20251125, "bob")
	dir := filepath.Join(t.TempDir(), "notes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: notes\ndescription: Alice's notes.\n---\nRead them.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	js := testkit.JetStream(t, e.conn(t, xtest.RoleClient))
	obs, err := js.ObjectStore(t.Context(), bus.NewSubjects("").ObjectStore(bus.ObjectSkills))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := skills.Push(t.Context(), obs, dir, "alice"); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, alice)
	if got := names(t, alice); !slices.Contains(got, "load_skill_through_path") {
		t.Fatalf("alice: %v", got)
	}
	if got := names(t, bob); slices.Contains(got, "load_skill_through_path") {
		t.Fatalf("bob: %v", got)
	}
	if r, err := call(t, alice, "load_skill_through_path", map[string]any{"skillId": "notes", "path": "SKILL.md"}, false); err != nil || r.IsError || !strings.Contains(textOf(r), "Read them.") {
		t.Fatalf("alice loads her skill: %+v %v", r, err)
	}
}

// TestWatchCost: the watches list a session when something changed, not
// on workers' heartbeats, and tell the client within milliseconds (the
// facade polls once an hour here). Run with -v for the numbers.
func TestWatchCost(t *testing.T) {
	e := newEnv(t)
	const s = "cost"
	c := e.connect(t, s, mcp.ProtocolVersion20251125, "alice")
	js := testkit.JetStream(t, e.conn(t, xtest.RoleClient))
	kv, err := js.KeyValue(t.Context(), bus.NewSubjects("").Bucket(bus.BucketWorkers))
	if err != nil {
		t.Fatal(err)
	}
	beats, err := kv.Watch(t.Context(), ">", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = beats.Stop() }()
	beat := func() {
		t.Helper()
		for {
			// One key per tool and worker: count the beats of one.
			if u := testkit.Recv(t, beats.Updates(), bound, "a heartbeat"); u != nil && strings.HasPrefix(u.Key(), "hello.") {
				return
			}
		}
	}
	// The watches' first values and the settle re-lists are over after
	// three beats (500 ms each); then three more beats list nothing.
	for range 3 {
		beat()
	}
	before := e.f.listed.Load()
	for range 3 {
		beat()
	}
	if n := e.f.listed.Load() - before; n != 0 {
		t.Fatalf("%d listings during three heartbeats of an idle deployment", n)
	}
	t.Logf("listings during three idle heartbeats: 0 (Poll fallback: one every %s)", 2*time.Second)

	// Latency from a change to tools/list_changed.
	measure := func(what string, change func()) {
		t.Helper()
		start := time.Now()
		change()
		waitChanged(t, c)
		t.Logf("%s → tools/list_changed in %s", what, time.Since(start).Round(time.Microsecond))
		// Let the settle re-lists of this change pass, so that the next
		// measurement starts clean: they change nothing, so no notification.
		for len(c.changed) > 0 {
			<-c.changed
		}
	}
	measure("reset_tools through the bus", func() { e.resetTools(t, s, map[string]bool{"ops": true}) })
	measure("session.activate", func() {
		if err := e.bus.Admin(t.Context(), "session.activate", s, map[string]any{"groups": []string{"site"}}, nil); err != nil {
			t.Fatal(err)
		}
	})
	measure("a worker registering", func() { e.extraWorker(t) })
}

// TestCluster: the facade on a 3-node cluster with every bucket
// replicated three times (the router, the worker, the facade and the
// agent on different nodes): calls, and list changes from the watches.
func TestCluster(t *testing.T) {
	e := newClusterEnv(t)
	for _, version := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		t.Run(version, func(t *testing.T) {
			s := "cl" + strings.ReplaceAll(version, "-", "")
			c := e.connect(t, s, version, "alice")
			if got, want := names(t, c), busNames(t, e, s, "alice"); !slices.Equal(got, want) {
				t.Fatalf("tools/list %v, bus %v", got, want)
			}
			if r, err := call(t, c, "hello", map[string]any{"name": "bob"}, false); err != nil || textOf(r) != "hello bob" {
				t.Fatalf("hello: %+v %v", r, err)
			}
			e.resetTools(t, s, map[string]bool{"ops": true})
			waitChanged(t, c)
			if got := names(t, c); !slices.Contains(got, "deploy") {
				t.Fatalf("after reset_tools through the bus: %v", got)
			}
			e.answeredWhileWaiting(t, c, s)
		})
	}
	e.workerComesAndGoes(t, e.connect(t, "clworkers", mcp.ProtocolVersion20251125, "alice"))
}
