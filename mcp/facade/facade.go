// Package facade serves a toolbus deployment as an MCP server, one MCP
// endpoint per bus session, on top of client (so it runs in any process):
// tools/list is the session's visible tools in mcp format, in the same
// order, and tools/call runs a one-call batch through the routers, so
// groups, validation, permissions and parking apply (PROTOCOL.md 12).
//
// Each bus session gets its own mcp-go MCPServer whose tools are replaced
// whenever the session's listing changes; mcp-go then tells that session's
// clients, and only them, notifications/tools/list_changed. A tool that is
// not listed is not registered, so it cannot be called.
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
	// compared with the bus; zero means 1s.
	Poll time.Duration
	// ParkWait is how long a parked call holds its tools/call open at
	// least (the tool's own timeout when longer is not known here); zero
	// means 10 minutes.
	ParkWait time.Duration
	// Logger receives the facade's logs; nil discards.
	Logger *slog.Logger
}

// Facade serves bus sessions over MCP. It is safe for concurrent use.
type Facade struct {
	cl  *client.Client
	cfg Config

	mu       sync.Mutex
	sessions map[string]*session
	ctx      context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// New returns a Facade over the deployment cl talks to.
func New(cl *client.Client, cfg Config) *Facade {
	if cfg.UserHeader == "" {
		cfg.UserHeader = "X-Toolbus-User"
	}
	if cfg.ContextHeader == "" {
		cfg.ContextHeader = "X-Toolbus-Context"
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.ParkWait <= 0 {
		cfg.ParkWait = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Facade{cl: cl, cfg: cfg, sessions: map[string]*session{}, ctx: ctx, stop: stop}
}

// Close stops every session's polling. It is safe to call twice.
func (f *Facade) Close() {
	f.stop()
	f.wg.Wait()
}

type ctxKey int

const (
	userKey ctxKey = iota
	contextKey
)

// Handler serves streamable HTTP at /mcp/<session>; a session id that is
// not a valid identifier, or another path, gets HTTP 404.
func (f *Facade) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/mcp/")
		if !ok || !bus.ValidID(id) {
			http.NotFound(w, r)
			return
		}
		s, err := f.session(id)
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
	s, err := f.session(sessionID)
	if err != nil {
		return err
	}
	std := server.NewStdioServer(s.mcp)
	std.SetContextFunc(func(ctx context.Context) context.Context { return context.WithValue(ctx, userKey, user) })
	return std.Listen(ctx, in, out)
}

// session is one bus session's MCP server.
type session struct {
	f    *Facade
	id   string
	mcp  *server.MCPServer
	http *server.StreamableHTTPServer

	mu    sync.Mutex
	raw   string         // the last listing, to compare
	order map[string]int // tool name → position in the listing
}

func (f *Facade) session(id string) (*session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sessions[id]; ok {
		return s, nil
	}
	s := &session{f: f, id: id, order: map[string]int{}}
	hooks := &server.Hooks{}
	hooks.AddBeforeListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest) { s.refresh(ctx) })
	s.mcp = server.NewMCPServer("toolbus", "1.0.0", server.WithToolCapabilities(true), server.WithHooks(hooks),
		server.WithElicitation(), server.WithToolFilter(s.filter))
	s.http = server.NewStreamableHTTPServer(s.mcp, server.WithStreamableHTTPLogger(f.cfg.Logger),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			ctx = context.WithValue(ctx, userKey, r.Header.Get(f.cfg.UserHeader))
			return context.WithValue(ctx, contextKey, r.Header.Get(f.cfg.ContextHeader))
		}))
	if err := s.refresh(f.ctx); err != nil {
		return nil, err
	}
	f.sessions[id] = s
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		s.poll()
	}()
	return s, nil
}

// poll compares the session's listing with the bus every Poll, and at
// once when a reset_tools or load_skill_through_path of the session
// finishes, whoever called it.
func (s *session) poll() {
	ev, err := s.f.cl.Watch(s.f.ctx, s.id)
	if err != nil {
		s.f.cfg.Logger.Warn("facade: watch", "session", s.id, "err", err)
		return
	}
	defer ev.Stop()
	t := time.NewTicker(s.f.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-s.f.ctx.Done():
			return
		case <-t.C:
			_ = s.refresh(s.f.ctx)
		case e, ok := <-ev.C:
			if !ok {
				return
			}
			if e.Type == bus.TypeCallResult {
				var r bus.Result
				if e.DataAs(&r) == nil && (r.Name == "reset_tools" || r.Name == "load_skill_through_path") {
					_ = s.refresh(s.f.ctx)
				}
			}
		}
	}
}

type listed struct {
	Name        string             `json:"name"`
	Description string             `json:"description"`
	InputSchema json.RawMessage    `json:"inputSchema"`
	Annotations mcp.ToolAnnotation `json:"annotations"`
}

// refresh lists the session's tools and, when they changed, replaces the
// MCP server's tools (which notifies its clients).
func (s *session) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := s.f.cl.Tools(ctx, s.id, bus.FormatMCP, nil)
	if err != nil {
		return fmt.Errorf("facade: list %s: %w", s.id, err)
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
		tool := mcp.Tool{Name: l.Name, Description: l.Description, RawInputSchema: l.InputSchema, Annotations: l.Annotations}
		tools = append(tools, server.ServerTool{Tool: tool, Handler: s.call})
		order[l.Name] = i
	}
	s.raw, s.order = string(raw), order
	s.mcp.SetTools(tools...)
	return nil
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
