// Package facade serves a toolbus deployment as an MCP server, one MCP
// endpoint per bus session: tools/list is the session's visible tools in
// mcp format, in the same order, and tools/call runs a one-call batch
// through the routers, so groups, validation, permissions and parking
// apply (PROTOCOL.md 12).
//
// Each bus session and user gets its own mcp-go MCPServer whose tools are
// replaced whenever that listing changes; mcp-go then tells its clients,
// and only them, notifications/tools/list_changed. A tool that is not
// listed is not registered, so it cannot be called.
package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// Config configures a Facade.
type Config struct {
	// UserHeader is the HTTP header whose value becomes the batch's and
	// the listing's user; "" means X-Toolbus-User.
	UserHeader string
	// ContextHeader is the HTTP header holding the batch's runtime context
	// as a JSON object; "" means X-Toolbus-Context.
	ContextHeader string
	// Poll is how often the listing of a session that has been used is
	// compared with the bus, besides the watches that trigger a listing at
	// once (the session's record, tool definitions, groups, workers
	// arriving or leaving, skills); zero means 2s.
	Poll time.Duration
	// ParkWait is the least a parked call holds its tools/call (or task)
	// open; a call waits up to its tool's timeout_ms, or this when longer.
	// Zero means no minimum.
	ParkWait time.Duration
	// ProgressEvery is how often a parked call sends a progress
	// notification while it waits (when the client sent a progress
	// token); zero means 10s.
	ProgressEvery time.Duration
	// Logger receives the facade's logs; nil discards.
	Logger *slog.Logger
}

// Facade serves bus sessions over MCP. It is safe for concurrent use.
type Facade struct {
	nc  *nats.Conn
	cl  *client.Client
	cfg Config

	mu       sync.Mutex
	sessions map[key]*session
	watched  map[string]func() // bus session → stop its KV watch
	ctx      context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup
	store    *storeWatch
}

// key names a session's MCP server: the bus session and the user.
type key struct{ session, user string }

// New returns a Facade over the deployment cl talks to (its connection
// and prefix; the facade's events and calls have the source
// "toolbus/mcp" only when cl was made with it).
func New(cl *client.Client, cfg Config) *Facade {
	if cfg.UserHeader == "" {
		cfg.UserHeader = "X-Toolbus-User"
	}
	if cfg.ContextHeader == "" {
		cfg.ContextHeader = "X-Toolbus-Context"
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	f := &Facade{nc: cl.Conn(), cl: cl, cfg: cfg,
		sessions: map[key]*session{}, watched: map[string]func(){}, ctx: ctx, stop: stop}
	f.store = newStoreWatch(f)
	return f
}

// Close stops every session's watching and polling. It is safe to call
// twice.
func (f *Facade) Close() {
	f.stop()
	f.wg.Wait()
}

type ctxKey int

const (
	contextKey ctxKey = iota
	taskKey
)

// taskRef is where an HTTP request's context learns the id of the task
// mcp-go created for it (a task-augmented tools/call).
type taskRef struct {
	mu sync.Mutex
	id string
}

func (r *taskRef) set(id string) { r.mu.Lock(); r.id = id; r.mu.Unlock() }

func (r *taskRef) get() string { r.mu.Lock(); defer r.mu.Unlock(); return r.id }

// Handler serves streamable HTTP at /mcp/<session>; a session id that is
// not a valid identifier, or another path, gets HTTP 404. Every revision
// mcp-go serves works: 2024-11-05 to 2025-11-25 through initialize, and
// 2026-07-28 (no MCP sessions) through server/discover, because the bus
// session comes from the path.
func (f *Facade) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/mcp/")
		if !ok || !bus.ValidID(id) {
			http.NotFound(w, r)
			return
		}
		s, err := f.session(id, r.Header.Get(f.cfg.UserHeader))
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		s.http.ServeHTTP(w, r)
	})
}

// ServeStdio serves the session over stdio (in, out) as user until ctx
// ends or in closes.
func (f *Facade) ServeStdio(ctx context.Context, sessionID, user string, in interface {
	Read([]byte) (int, error)
}, out interface{ Write([]byte) (int, error) }) error {
	if !bus.ValidID(sessionID) {
		return fmt.Errorf("facade: session id %q must match ^[A-Za-z0-9_-]{1,128}$", sessionID)
	}
	s, err := f.session(sessionID, user)
	if err != nil {
		return err
	}
	return server.NewStdioServer(s.mcp).Listen(ctx, in, out)
}

// session is one bus session's MCP server for one user.
type session struct {
	f     *Facade
	id    string
	user  string
	mcp   *server.MCPServer
	http  *server.StreamableHTTPServer
	dirty chan struct{} // a watch saw a change: list again

	mu      sync.Mutex
	raw     string                        // the last listing, to compare
	order   map[string]int                // tool name → position in the listing
	tasks   map[string]context.CancelFunc // task id → cancels its call
	pending map[string]*pending           // request state → a call waiting for the host user's decision
}

func (f *Facade) session(id, user string) (*session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := key{id, user}
	if s, ok := f.sessions[k]; ok {
		return s, nil
	}
	if f.ctx.Err() != nil {
		return nil, fmt.Errorf("facade: closed")
	}
	s := &session{f: f, id: id, user: user, order: map[string]int{}, dirty: make(chan struct{}, 1),
		tasks: map[string]context.CancelFunc{}, pending: map[string]*pending{}}
	hooks := &server.Hooks{}
	hooks.AddBeforeListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest) { _ = s.refresh(ctx) })
	th := &server.TaskHooks{}
	th.AddOnTaskCreated(func(ctx context.Context, m server.TaskMetrics) {
		if r, ok := ctx.Value(taskKey).(*taskRef); ok {
			r.set(m.TaskID)
		}
	})
	th.AddOnTaskCancelled(func(_ context.Context, m server.TaskMetrics) { s.endTask(m.TaskID) })
	s.mcp = server.NewMCPServer("toolbus", "1.0.0", server.WithToolCapabilities(true), server.WithHooks(hooks),
		server.WithElicitation(), server.WithToolFilter(s.filter),
		server.WithTaskCapabilities(true, true, true), server.WithTaskHooks(th))
	s.http = server.NewStreamableHTTPServer(s.mcp, server.WithStreamableHTTPLogger(f.cfg.Logger),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			ctx = context.WithValue(ctx, taskKey, &taskRef{})
			return context.WithValue(ctx, contextKey, r.Header.Get(f.cfg.ContextHeader))
		}))
	if err := s.refresh(f.ctx); err != nil {
		return nil, err
	}
	f.sessions[k] = s
	if _, ok := f.watched[id]; !ok {
		f.watched[id] = f.store.watchSession(id)
	}
	f.store.start()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		s.poll()
	}()
	return s, nil
}

// detachTask returns, for a task-augmented call over HTTP, a context that
// outlives the HTTP request (mcp-go runs the task with the request's
// context, which ends with the POST) and ends when the task is cancelled
// (tasks/cancel), the call returns or the facade closes; otherwise ctx.
func (s *session) detachTask(ctx context.Context, req mcp.CallToolRequest) (context.Context, func()) {
	r, _ := ctx.Value(taskKey).(*taskRef)
	if req.Params.Task == nil || r == nil || r.get() == "" {
		return ctx, func() {}
	}
	id := r.get()
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unlink := context.AfterFunc(s.f.ctx, cancel) // Close ends it too
	s.mu.Lock()
	s.tasks[id] = cancel
	s.mu.Unlock()
	return dctx, func() { unlink(); s.endTask(id) }
}

// endTask forgets task id and ends its context (cancelling its call when
// it still runs).
func (s *session) endTask(id string) {
	s.mu.Lock()
	stop, ok := s.tasks[id]
	delete(s.tasks, id)
	s.mu.Unlock()
	if ok {
		stop()
	}
}

// changed marks the listings of bus session id (every session when id is
// "") to be compared with the bus at once.
func (f *Facade) changed(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, s := range f.sessions {
		if id == "" || k.session == id {
			select {
			case s.dirty <- struct{}{}:
			default:
			}
		}
	}
}

// settle are the delays after a watched change at which the session is
// listed again: the routers' caches are fed by the same watches, so the
// first listing may come before the router has the change.
var settle = []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond}

// poll lists the session again when a watch saw a change (at once and
// after each settle delay), and every Poll as a fallback for what no
// watch sees (a worker that vanished without leaving, whose liveness key
// expired).
func (s *session) poll() {
	t := time.NewTicker(s.f.cfg.Poll)
	defer t.Stop()
	var again <-chan time.Time
	step := len(settle)
	for {
		select {
		case <-s.f.ctx.Done():
			return
		case <-t.C:
		case <-s.dirty:
			step = 0
		case <-again:
		}
		again = nil
		_ = s.refresh(s.f.ctx)
		if step++; step < len(settle) {
			again = time.After(settle[step] - settle[step-1])
		}
	}
}

type listed struct {
	Name        string             `json:"name"`
	Description string             `json:"description"`
	InputSchema json.RawMessage    `json:"inputSchema"`
	Annotations mcp.ToolAnnotation `json:"annotations"`
}

// refresh lists the session's tools for its user and, when they changed,
// replaces the MCP server's tools (which notifies its clients).
func (s *session) refresh(ctx context.Context) error {
	s.f.store.count()
	list, err := s.f.list(ctx, s.id, s.user, bus.FormatMCP)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(list.Tools)
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(raw) == s.raw {
		return nil
	}
	tools := make([]server.ServerTool, 0, len(list.Tools))
	order := map[string]int{}
	for i, t := range list.Tools {
		var l listed
		if err := json.Unmarshal(t, &l); err != nil {
			return fmt.Errorf("facade: listing of %s: %w", s.id, err)
		}
		tool := mcp.Tool{Name: l.Name, Description: l.Description, RawInputSchema: l.InputSchema, Annotations: l.Annotations,
			Execution: &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}}
		tools = append(tools, server.ServerTool{Tool: tool, Handler: s.call})
		order[l.Name] = i
	}
	s.raw, s.order = string(raw), order
	s.mcp.SetTools(tools...)
	return nil
}

// list asks the routers for the session's tools in format, as user sees
// them (PROTOCOL.md 4.1: the query's user selects the user's skills).
func (f *Facade) list(ctx context.Context, session, user, format string) (*bus.ToolsList, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	q := bus.ToolsQuery{Format: format}
	if user != "" {
		q.User = client.Input(user)
	}
	list, err := f.cl.Query(ctx, session, q)
	if err != nil {
		return nil, fmt.Errorf("facade: list %s: %w", session, err)
	}
	return list, nil
}

// filter keeps the listed tools, in the listing's order; mcp-go applies it
// on tools/call too.
func (s *session) filter(_ context.Context, tools []mcp.Tool) []mcp.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]mcp.Tool, 0, len(tools))
	for _, t := range tools {
		if _, ok := s.order[t.Name]; ok {
			out = append(out, t)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && s.order[out[j].Name] < s.order[out[j-1].Name]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
