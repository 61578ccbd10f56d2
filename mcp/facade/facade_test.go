package facade

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

const bound = 15 * time.Second

type env struct {
	bus *client.Client
	url string
	f   *Facade
}

func newEnv(t *testing.T) *env {
	t.Helper()
	var f *Facade
	srv := bustest.RunServer(t)
	r, err := router.New(bustest.Connect(t, srv), router.Config{DefaultMode: "bypass", Store: store.Config{Heartbeat: 500 * time.Millisecond},
		Groups: []bus.Group{{Name: "ops", Description: "Operations.", Scope: bus.ScopeMeta}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	w, err := worker.New(bustest.Connect(t, srv), worker.Config{Heartbeat: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	type hi struct {
		Name string `json:"name"`
	}
	if err := worker.Register(w, bus.ToolDef{Name: "hello", Description: "Greets.", ReadOnly: true},
		func(_ context.Context, _ *worker.Call, in hi) (string, error) { return "hello " + in.Name, nil }); err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(w, bus.ToolDef{Name: "deploy", Description: "Deploys.", Groups: []string{"ops"}},
		func(context.Context, *worker.Call, struct{}) (string, error) { return "deployed", nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.Handle(bus.ToolDef{Name: "ask_human", Description: "A person answers.", External: true,
		InputSchema: json.RawMessage(`{"type":"object"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Drain(context.Background()) })
	bc := client.New(bustest.Connect(t, srv), client.Config{Source: "test/agent"})
	f = New(client.New(bustest.Connect(t, srv), client.Config{Source: "toolbus/mcp"}), Config{Poll: 200 * time.Millisecond, ParkWait: 3 * time.Second})
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(func() { hs.Close(); f.Close() })
	return &env{bus: bc, url: hs.URL, f: f}
}

// connect returns an initialised mcp-go client of session s, and a channel
// that gets every tools/list_changed.
func (e *env) connect(t *testing.T, s, version string, opts ...mcpclient.ClientOption) (*mcpclient.Client, chan struct{}) {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(e.url+"/mcp/"+s, transport.WithContinuousListening(),
		transport.WithHTTPHeaders(map[string]string{"X-Toolbus-User": "alice"}), transport.WithHTTPLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, append([]mcpclient.ClientOption{mcpclient.WithLegacyProtocolOnly()}, opts...)...)
	changed := make(chan struct{}, 16)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationToolsListChanged) {
			changed <- struct{}{}
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
	return c, changed
}

func names(t *testing.T, c *mcpclient.Client) []string {
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

func busNames(t *testing.T, e *env, s string) []string {
	t.Helper()
	list, err := e.bus.Tools(t.Context(), s, bus.FormatMCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, raw := range list.Tools {
		var l listed
		_ = json.Unmarshal(raw, &l)
		out = append(out, l.Name)
	}
	return out
}

func call(t *testing.T, c *mcpclient.Client, name string, args map[string]any) (*mcp.CallToolResult, error) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
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

func waitChanged(t *testing.T, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
		t.Fatal("no tools/list_changed within 2s")
	}
}

func TestHTTP(t *testing.T) {
	e := newEnv(t)
	for _, version := range []string{mcp.ProtocolVersion20241105, mcp.ProtocolVersion20251125} {
		t.Run(version, func(t *testing.T) {
			s := "s" + version[:4] + version[5:7]
			c, changed := e.connect(t, s, version)
			got, want := names(t, c), busNames(t, e, s)
			if !slices.Equal(got, want) || !slices.Contains(got, "hello") || slices.Contains(got, "deploy") {
				t.Fatalf("tools/list %v, bus %v", got, want)
			}
			if r, err := call(t, c, "hello", map[string]any{"name": "bob"}); err != nil || r.IsError || textOf(r) != "hello bob" {
				t.Fatalf("hello: %+v %v", r, err)
			}
			if r, err := call(t, c, "hello", map[string]any{"name": 3}); err != nil || !r.IsError || textOf(r) == "" {
				t.Fatalf("validation: %+v %v", r, err)
			}
			if _, err := call(t, c, "deploy", nil); err == nil {
				t.Fatal("a tool outside the session's view was called")
			}

			// reset_tools through the bus: the MCP client is told.
			if _, err := e.bus.Call(t.Context(), s, bus.Batch{Calls: []bus.Call{{ID: "r1", Name: "reset_tools", Input: client.Input(map[string]bool{"ops": true})}}}); err != nil {
				t.Fatal(err)
			}
			waitChanged(t, changed)
			if got := names(t, c); !slices.Contains(got, "deploy") {
				t.Fatalf("after reset_tools through the bus: %v", got)
			}
			if r, err := call(t, c, "deploy", nil); err != nil || textOf(r) != "deployed" {
				t.Fatalf("deploy: %+v %v", r, err)
			}
			// reset_tools through MCP.
			if r, err := call(t, c, "reset_tools", map[string]any{"ops": false}); err != nil || r.IsError {
				t.Fatalf("reset_tools: %+v %v", r, err)
			}
			waitChanged(t, changed)
			if got := names(t, c); slices.Contains(got, "deploy") {
				t.Fatalf("after reset_tools through MCP: %v", got)
			}

			// A parked external call answered while the MCP call waits.
			ev, err := e.bus.Watch(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Stop()
			res := make(chan *mcp.CallToolResult, 1)
			go func() {
				r, _ := call(t, c, "ask_human", map[string]any{})
				res <- r
			}()
			for m := range ev.C {
				if m.Type == bus.TypeCallParked {
					var p bus.ParkedEvent
					_ = m.DataAs(&p)
					if err := e.bus.Answer(t.Context(), "ask_human", s, m.ReplyID, p.Calls[0].ID,
						bus.Answer{State: bus.StateSuccess, Output: bus.Text("forty-two")}); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			if r := <-res; r == nil || r.IsError || textOf(r) != "forty-two" {
				t.Fatalf("parked call: %+v", r)
			}
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

func TestStdio(t *testing.T) {
	e := newEnv(t)
	cin, sout := io.Pipe() // server → client
	sin, cout := io.Pipe() // client → server
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- e.f.ServeStdio(ctx, "stdio1", "alice", sin, sout) }()
	t.Cleanup(func() {
		cancel()
		_ = cout.Close()
		_ = sout.Close()
		<-served
	})
	c := mcpclient.NewClient(transport.NewIO(cin, cout, io.NopCloser(strings.NewReader(""))))
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got, want := names(t, c), busNames(t, e, "stdio1"); !slices.Equal(got, want) {
		t.Fatalf("tools/list %v, bus %v", got, want)
	}
	if r, err := call(t, c, "hello", map[string]any{"name": "eve"}); err != nil || textOf(r) != "hello eve" {
		t.Fatalf("hello: %+v %v", r, err)
	}
	if _, err := call(t, c, "deploy", nil); err == nil {
		t.Fatal("a tool outside the session's view was called")
	}
}

// elicitor is a host's user who answers every confirmation with decision.
type elicitor struct {
	decision string
	asked    chan string
}

func (el *elicitor) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	el.asked <- req.Params.Message
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"decision": el.decision}}}, nil
}

func TestElicitation(t *testing.T) {
	e := newEnv(t)
	const s = "elicit"
	if err := e.bus.Admin(t.Context(), "session.mode", s, map[string]string{"mode": "default"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.bus.Call(t.Context(), s, bus.Batch{Calls: []bus.Call{{ID: "r1", Name: "reset_tools", Input: client.Input(map[string]bool{"ops": true})}}}); err != nil {
		t.Fatal(err)
	}
	el := &elicitor{decision: choiceAllow, asked: make(chan string, 4)}
	c, _ := e.connect(t, s, mcp.ProtocolVersion20251125, mcpclient.WithElicitationHandler(el))
	r, err := call(t, c, "deploy", map[string]any{})
	if err != nil || r.IsError || textOf(r) != "deployed" {
		t.Fatalf("confirmed through elicitation: %+v %v", r, err)
	}
	if msg := <-el.asked; !strings.Contains(msg, "deploy") {
		t.Fatalf("elicitation message %q", msg)
	}
	el.decision = choiceDeny
	r, err = call(t, c, "deploy", map[string]any{})
	if err != nil || !r.IsError || !strings.Contains(textOf(r), "denied") {
		t.Fatalf("denied through elicitation: %+v %v", r, err)
	}
}

func TestParkDeadline(t *testing.T) {
	e := newEnv(t)
	c, _ := e.connect(t, "late", mcp.ProtocolVersion20251125)
	r, err := call(t, c, "ask_human", map[string]any{})
	if err != nil || !r.IsError || !strings.Contains(textOf(r), "still parked") || !strings.Contains(textOf(r), "toolbus.answer.ask_human") {
		t.Fatalf("parked past the wait: %+v %v", r, err)
	}
}
