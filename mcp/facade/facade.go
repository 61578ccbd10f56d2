// Package facade serves a toolbus deployment as an MCP server, one endpoint
// per bus session: tools/list is the session's visible tools and tools/call
// runs a one-call batch through the routers (docs/protocol.md 12,
// docs/mcp.md). Each (session, user) has its own mcp-go MCPServer; a tool
// that is not listed is not registered, so it cannot be called.
package facade

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/store"
)

// Config configures a Facade.
type Config struct {
	// UserHeader is the HTTP header whose value becomes the batch's and
	// the listing's user; "" means X-Toolbus-User.
	UserHeader string
	// ContextHeader is the HTTP header holding the batch's runtime context
	// as a JSON object; "" means X-Toolbus-Context.
	ContextHeader string
	// Poll is how often a used session's listing is compared with the bus,
	// besides the watches; zero means 2s.
	Poll time.Duration
	// ParkWait is the least a parked call holds its tools/call (or task)
	// open beside its tool's timeout_ms; zero means no minimum.
	ParkWait time.Duration
	// QuietHold is the longest a parked call holds the tools/call of a host
	// with no progress token nor task (which gives up on its own), then
	// answers that it is still parked; zero means 45s.
	QuietHold time.Duration
	// ProgressEvery is how often a parked call sends a progress
	// notification while it waits; zero means 10s.
	ProgressEvery time.Duration
	// Auth authenticates every HTTP request (Tokens, OAuth); nil serves
	// HTTP only when Insecure is set.
	Auth Authenticator
	// Insecure serves HTTP without authentication (the user from
	// UserHeader, every session): a loopback desktop only (CheckListen).
	Insecure bool
	// Confirm is the confirm policy of identities that name none, and of
	// stdio and insecure HTTP; "" means ConfirmApprovers.
	Confirm Confirm
	// Idle is how long a (session, user) MCP server may go unused before
	// it is dropped; zero means 10 minutes.
	Idle time.Duration
	// MaxSessions bounds the (session, user) MCP servers kept (a new one
	// is refused, HTTP 503, when all are busy); zero means 1000.
	MaxSessions int
	// MaxTasks bounds the MCP task records one (session, user) keeps;
	// zero means DefaultMaxTasks.
	MaxTasks int
	// MaxBytes is the soft bound of the facade's bucket (store.Bound): past
	// it a new task or request state is refused; zero means
	// store.DefaultMCPMaxBytes, negative none.
	MaxBytes int64
	// Refusals counts the refusals at MaxBytes for the router process that
	// serves the facade (store.Config.MCPRefusals: its metrics and status);
	// nil: the facade's own count.
	Refusals *store.Refusals
	// Replicas of the facade's bucket when the facade creates it (routers
	// create it at start); zero means 1.
	Replicas int
	// MaxResource bounds the bytes of a stored output one resources/read
	// returns; zero means DefaultMaxResource.
	MaxResource int64
	// Logger receives the facade's logs; nil discards.
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultIdle        = 10 * time.Minute
	DefaultMaxSessions = 1000
)

// Facade serves bus sessions over MCP. It is safe for concurrent use.
type Facade struct {
	nc  *nats.Conn
	cl  *client.Client
	cfg Config

	ctx     context.Context // life's Background: ends when the facade drains
	life    *life.Life
	gate    *gatekeeper // auth.go
	table   *table
	watch   sync.Once    // starts the listing watch (watchListings)
	kv      *kvStore     // tasks_store.go
	tasks   *taskRunners // the tasks this process runs or follows
	evicted atomic.Int64 // for the tests and measurements
	listed  atomic.Int64 // for the tests and measurements
}

// key names a session's MCP server.
type key struct {
	session, user string
	confirm       Confirm
	stdio         bool
}

// New returns a Facade over the deployment cl talks to. Give it a connection
// of its own logged in as security.RoleFacade, never the router's.
func New(cl *client.Client, cfg Config) *Facade {
	cfg.UserHeader = cmp.Or(cfg.UserHeader, "X-Toolbus-User")
	cfg.ContextHeader = cmp.Or(cfg.ContextHeader, "X-Toolbus-Context")
	cfg.Confirm = cmp.Or(cfg.Confirm, ConfirmApprovers)
	orDefault(&cfg.Poll, 2*time.Second)
	orDefault(&cfg.QuietHold, 45*time.Second)
	orDefault(&cfg.ProgressEvery, 10*time.Second)
	orDefault(&cfg.Idle, DefaultIdle)
	orDefault(&cfg.MaxSessions, DefaultMaxSessions)
	orDefault(&cfg.MaxTasks, DefaultMaxTasks)
	orDefault(&cfg.MaxResource, DefaultMaxResource)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lf := life.New(life.Config{Logger: cfg.Logger})
	f := &Facade{nc: cl.Conn(), cl: cl, cfg: cfg, ctx: lf.Background(), life: lf}
	f.gate = &gatekeeper{auth: cfg.Auth, userHeader: cfg.UserHeader, log: cfg.Logger}
	f.table = newTable(f.ctx, cfg.Idle, cfg.MaxSessions, &f.evicted)
	f.kv = &kvStore{nc: f.nc, subj: cl.Subjects(), replicas: cfg.Replicas, maxTasks: cfg.MaxTasks, log: cfg.Logger,
		soft: cmp.Or(cfg.MaxBytes, store.DefaultMCPMaxBytes), refusals: cfg.Refusals}
	f.tasks = &taskRunners{closing: f.ctx, loop: f.life.Loop, store: f.kv, await: f.awaitResult, tasks: cl.Tasks(), log: cfg.Logger,
		local: map[string]func(*taskRecord){}, followed: map[string]struct{}{},
		listens: make(chan struct{}, maxListens)}
	f.life.Loop(func(context.Context) { f.table.sweep() })
	return f
}

// orDefault sets *v to d when it is not positive.
func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Drain stops every session's watching and polling, waiting for them until
// ctx ends (internal/life). It is safe to call twice and concurrently.
func (f *Facade) Drain(ctx context.Context) error { return f.life.Drain(ctx) }

// Closed is closed once Drain has returned.
func (f *Facade) Closed() <-chan struct{} { return f.life.Closed() }

type ctxKey int

const (
	contextKey    ctxKey = iota // the request's ContextHeader
	callStreamKey               // a tools/call's *callStream (stream.go)
)

// Handler serves streamable HTTP at /mcp/<session> (sessionOf; else 404).
// Every request is authenticated (Config.Auth; 401 with a challenge), then
// checked against its identity: a session it may not use, or a user header
// that is not its own, gets 403 and nothing is published. With OAuth the
// RFC 9728 metadata is served at /.well-known/oauth-protected-resource.
func (f *Facade) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(adoptHeader)                              // only the facade's own adoption sets it (crossing.go)
		if f.gate.serveMetadata(w, r) || refuseRebound(w, r) { // auth.go
			return
		}
		id, ok := sessionOf(r)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if f.cfg.Auth == nil && !f.cfg.Insecure {
			f.cfg.Logger.Error("facade: HTTP served with neither Auth nor Insecure; refusing every request")
			f.gate.unauthorized(w, errors.New("the facade has no authentication configured"))
			return
		}
		ident, ok := f.gate.gate(w, r, id)
		if !ok || refuseForm(w, r) { // auth.go
			return
		}
		s, err := f.acquire(key{id, ident.User, cmp.Or(ident.Confirm, f.cfg.Confirm), false})
		if err != nil {
			if errors.Is(err, errFull) {
				w.Header().Set("Retry-After", "1")
			}
			status := http.StatusServiceUnavailable
			if be, ok := errors.AsType[*bus.Error](err); ok && be.Code == bus.CodeDenied {
				status = http.StatusForbidden // the router denied the identity
			}
			writeHTTPError(w, status, err.Error())
			return
		}
		defer f.table.release(s)
		body, m, ok := readPost(w, r)
		if !ok || s.serveOwn(w, r, m) {
			return
		}
		if modernCancel(r, m) {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if m != nil && m.Method == string(mcp.MethodToolsCall) {
			st := newCallStream(w)
			defer st.end()
			w, r = st, r.WithContext(context.WithValue(r.Context(), callStreamKey, st))
		}
		if s.cross.serveHTTP(w, r, body, m) { // crossing.go
			return
		}
		s.http.ServeHTTP(w, r)
	})
}

// SessionHeader names the bus session of a request to /mcp, for clients
// whose URL path cannot carry it (the MCP Inspector rewrites paths to
// /mcp); the query parameter "session" does the same.
const SessionHeader = "X-Toolbus-Session"

// sessionOf returns the bus session a request is for: the path
// /mcp/<session> (or /mcp/<session>/mcp, as clients that append /mcp
// make it), else, on /mcp itself, SessionHeader or ?session=.
func sessionOf(r *http.Request) (id string, ok bool) {
	p := r.URL.Path
	if p == "/mcp" || p == "/mcp/" {
		id = cmp.Or(r.Header.Get(SessionHeader), r.URL.Query().Get("session"))
		return id, bus.ValidID(id)
	}
	rest, found := strings.CutPrefix(p, "/mcp/")
	if !found {
		return "", false
	}
	rest = strings.TrimSuffix(strings.TrimSuffix(rest, "/"), "/mcp")
	return rest, bus.ValidID(rest)
}

// ServeStdio serves the session over stdio as user until ctx ends or in
// closes, with Config.Confirm. Stdio has no authentication: it is for a
// desktop host whose user owns the facade's credentials.
func (f *Facade) ServeStdio(ctx context.Context, sessionID, user string, in io.Reader, out io.Writer) error {
	if !bus.ValidID(sessionID) {
		return fmt.Errorf("facade: session id %q must match ^[A-Za-z0-9_-]{1,128}$", sessionID)
	}
	s, err := f.acquire(key{sessionID, user, f.cfg.Confirm, true})
	if err != nil {
		return err
	}
	defer f.table.release(s)
	// A tasks/result the filter started ends with the connection.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in2, out2 := interceptStdio(ctx, in, out, s.take)
	return server.NewStdioServer(s.mcp).Listen(ctx, in2, out2)
}

// session is one bus session's MCP server for one user (and policy).
type session struct {
	f      *Facade
	id     string
	user   string
	policy Confirm
	stdio  bool
	// noTasks: its login cannot reach the bucket (a stdio host on an
	// agent's credentials): no MCP tasks, parked calls held with progress.
	noTasks bool
	mcp     *server.MCPServer
	http    *server.StreamableHTTPServer
	dirty   chan struct{} // a watch saw a change: list again
	ctx     context.Context
	cancel  context.CancelFunc // ends its polling (eviction, Close)

	// Its parts (Facade.wire); the session keeps the listing and its calm.
	calls     *caller    // call.go
	confirms  *confirmer // elicit.go
	questions *relayer
	resources *resources // resources.go
	tasks     *taskFront // tasks*.go
	cross     *crossing  // crossing.go

	// Guarded by the table's mu.
	active int       // requests (or a stdio connection) being served
	last   time.Time // when the last one began or ended

	mu     sync.Mutex
	groups string         // the last groups listing, to compare
	calm   calm           // list changes not yet applied
	raw    string         // the last listing, to compare
	order  map[string]int // tool name → position in the listing
}

// acquire returns k's MCP server, made (and listed once) when there is
// none, and counts a request on it until release.
func (f *Facade) acquire(k key) (*session, error) {
	if s := f.table.use(k); s != nil {
		return s, nil
	}
	if f.ctx.Err() != nil {
		return nil, fmt.Errorf("facade: closed")
	}
	// Round trips, outside the table's lock.
	f.watchListings()
	s := f.newSession(k)
	if err := s.refresh(f.ctx, false); err != nil {
		s.cancel()
		return nil, err
	}
	got, err := f.table.add(k, s, func() { f.life.Loop(func(context.Context) { s.poll() }) })
	if got != s {
		s.cancel()
	}
	return got, err
}

// firstWatchWait bounds the first attempt to start the listing watch;
// what it could not start is tried again every Poll.
const firstWatchWait = 5 * time.Second

// watchListings starts, once, the watch that marks the sessions whose
// listing may have changed (client.WatchListings), stopped when the
// facade drains. What no watch sees, the sessions' poll lists again.
func (f *Facade) watchListings() {
	f.watch.Do(func() {
		ctx, cancel := context.WithTimeout(f.ctx, firstWatchWait)
		defer cancel()
		w := client.WatchListings(ctx, f.cl, f.cfg.Poll, f.table.changed)
		stop := func(ctx context.Context) { _ = w.Stop(context.WithoutCancel(ctx)) }
		if !f.life.Loop(func(ctx context.Context) { <-ctx.Done(); stop(ctx) }) {
			stop(f.ctx)
		}
	})
}

// newSession makes k's MCP server; acquire starts its polling.
func (f *Facade) newSession(k key) *session {
	ctx, cancel := context.WithCancel(f.ctx)
	s := &session{f: f, id: k.session, user: k.user, policy: k.confirm, stdio: k.stdio, noTasks: !f.kv.available(f.ctx), order: map[string]int{}, dirty: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel}
	f.wire(s)
	hooks := &server.Hooks{}
	hooks.AddBeforeListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest) { _ = s.refresh(ctx, false); s.flush() })
	hooks.AddAfterInitialize(func(_ context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
		downgradeInit(res)
	})
	hooks.AddBeforeInitialize(func(ctx context.Context, _ any, req *mcp.InitializeRequest) { s.cross.remember(ctx, req) })
	// mcp-go advertises tasks; the facade answers them (tasks.go).
	opts := []server.ServerOption{server.WithToolCapabilities(true), server.WithExperimental(groupingCapability()),
		server.WithExtensions(groupingCapability()), server.WithHooks(hooks), server.WithToolFilter(s.filter),
		server.WithToolHandlerMiddleware(downgradeMiddleware), server.WithToolHandlerMiddleware(s.questions.middleware)}
	opts = append(opts, s.resources.options(hooks)...)
	if !s.noTasks {
		opts = append(opts, server.WithTaskCapabilities(true, true, true))
	}
	// No server.WithElicitation: elicitation is a capability the client
	// declares, and mcp-go would list it among the server's (issue 29,
	// F4). The facade elicits without it (mcp-go checks only the client's).
	s.mcp = server.NewMCPServer("toolbus", "1.0.0", opts...)
	s.resources.mcp = s.mcp
	s.mcp.SetResourceTemplates(s.resources.outputsTemplate()) // readable before any listing
	s.http = server.NewStreamableHTTPServer(s.mcp, server.WithStreamableHTTPLogger(f.cfg.Logger),
		server.WithSessionIdManagerResolver(adoptResolver{}), // crossing.go
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			return context.WithValue(ctx, contextKey, r.Header.Get(f.cfg.ContextHeader))
		}))
	return s
}

// wire makes s's parts, each over what it needs of the facade and the
// session: the one place that knows both (docs/mcp.md "Structure").
func (f *Facade) wire(s *session) {
	s.confirms = &confirmer{bus: f.cl.Parked(), session: s.id, user: s.user, policy: s.policy, remember: f.cfg.Auth == nil,
		closing: f.ctx, loop: f.life.Loop, states: f.kv, await: f.awaitResult, log: f.cfg.Logger, pending: map[string]*round{}}
	s.calls = &caller{bus: clientBus{f.cl}, session: s.id, user: s.user, closing: f.ctx, list: f.list, cfg: &f.cfg,
		mayElicit: s.confirms.mayElicit, confirm: s.confirms.confirm}
	s.confirms.run, s.confirms.holds = s.calls.run, s.calls.holds
	s.questions = &relayer{cl: f.cl, session: s.id, user: s.user, mayElicit: s.confirms.mayElicit, log: f.cfg.Logger}
	s.confirms.questions, s.confirms.cancel = s.questions, f.cl.Cancel
	s.resources = &resources{session: s.id, user: s.user, list: f.list, nc: f.nc, prefix: f.cl.Subjects().Prefix,
		fetch: f.cl.Outputs(), maxResource: f.cfg.MaxResource, log: f.cfg.Logger}
	s.tasks = &taskFront{session: s.id, user: s.user, store: f.kv, runners: f.tasks, cl: f.cl, listed: s.listed,
		calls: s.calls, confirms: s.confirms, questions: s.questions,
		send: func(sid, method string, params map[string]any) error {
			return s.mcp.SendNotificationToSpecificClient(sid, method, params)
		}}
	s.cross = &crossing{tag: nuid.Next(), nc: f.nc, store: f.kv, session: s.id, user: s.user, policy: s.policy, local: func() http.Handler { return s.http }, log: f.cfg.Logger}
}

func (s *session) listed(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.order[name]
	return ok
}

// settle are the delays after a watched change at which the session is
// listed again, since the router's cache may lag the change.
var settle = []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond}

// poll lists the session again when a watch saw a change (at once and after
// each settle delay), and every Poll for what no watch sees.
func (s *session) poll() {
	t := time.NewTicker(s.f.cfg.Poll)
	defer t.Stop()
	var again <-chan time.Time
	step := len(settle)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.dirty:
			step = 0
		case <-again:
		}
		again = nil
		_ = s.refresh(s.ctx, true) // a watch or the poll: coalesced
		if step++; step < len(settle) {
			again = time.After(settle[step] - settle[step-1])
		}
	}
}

// refresh lists the session's tools for its user and, when they changed,
// replaces the MCP server's tools (which notifies its clients): at once,
// or, to coalesce, on the trailing edge of a burst (applyLocked).
func (s *session) refresh(ctx context.Context, coalesce bool) error {
	s.f.listed.Add(1)
	list, err := s.f.list(ctx, s.id, s.user, bus.FormatMCP)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(list.Tools)
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(raw) == s.raw {
		s.groupsChanged(list.Groups)
		return nil
	}
	tools := make([]server.ServerTool, 0, len(list.Tools))
	order := map[string]int{}
	for i, t := range list.Tools {
		// The router's MCP format (schemas/export.go), schemas kept as
		// they are.
		var l struct {
			mcp.Tool
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		}
		if err := json.Unmarshal(t, &l); err != nil {
			return fmt.Errorf("facade: listing of %s: %w", s.id, err)
		}
		tool := l.Tool
		tool.RawInputSchema, tool.RawOutputSchema = l.InputSchema, l.OutputSchema
		if !s.noTasks {
			tool.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
		}
		handler := server.ToolHandlerFunc(s.call)
		if len(l.OutputSchema) > 0 && string(l.OutputSchema) != "null" {
			handler = structurer{session: s.id, fetch: s.f.cl.Outputs(), max: s.f.cfg.MaxResource}.wrap(handler) // call.go
		}
		tools = append(tools, server.ServerTool{Tool: tool, Handler: handler})
		order[l.Name] = i
	}
	s.raw = string(raw)
	s.applyLocked(coalesce, tools, order)
	s.groupsChanged(list.Groups)
	return nil
}

// list asks the routers for the session's tools as user sees them
// (docs/protocol.md 4.1).
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
func (s *session) filter(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]mcp.Tool, 0, len(tools))
	for _, t := range tools {
		if _, ok := s.order[t.Name]; ok {
			out = append(out, t)
		}
	}
	slices.SortStableFunc(out, func(a, b mcp.Tool) int { return cmp.Compare(s.order[a.Name], s.order[b.Name]) })
	return downgradeTools(revisionFrom(ctx), out)
}

// Calm and MaxCalm bound the coalescing of list changes (docs/mcp.md "Calm
// lists"); a host's own tools/list applies a pending change at once.
const (
	Calm    = 250 * time.Millisecond
	MaxCalm = time.Second
)

// calm is a session's change not yet applied. Guarded by session.mu.
type calm struct {
	tools   []server.ServerTool
	order   map[string]int
	pending bool
	first   time.Time   // the first change not yet applied
	last    time.Time   // when a change was last applied (a notification sent)
	timer   *time.Timer // applies the pending change
	applied string      // the listing the MCP server has (session.raw when set)
	sent    int         // notifications sent, for the tests
}

// applyLocked takes a changed listing: at once, or, to coalesce, on the
// trailing edge of its burst.
func (s *session) applyLocked(coalesce bool, tools []server.ServerTool, order map[string]int) {
	c := &s.calm
	c.tools, c.order = tools, order
	now := time.Now()
	if s.raw == c.applied && c.sent > 0 {
		// Back to what the hosts have: nothing to tell them.
		c.pending = false
		if c.timer != nil {
			c.timer.Stop()
		}
		return
	}
	if !coalesce {
		s.setLocked(now)
		return
	}
	if !c.pending {
		c.pending, c.first = true, now
	}
	// Calm after now, at most MaxCalm after the burst began; never sooner
	// than Calm after the last notification.
	due := now.Add(Calm)
	if cap := c.first.Add(MaxCalm); due.After(cap) {
		due = cap
	}
	if next := c.last.Add(Calm); next.After(due) {
		due = next
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(time.Until(due), s.flush)
		return
	}
	c.timer.Reset(time.Until(due))
}

func (s *session) setLocked(now time.Time) {
	c := &s.calm
	if c.timer != nil {
		c.timer.Stop()
	}
	c.pending, c.last, c.applied = false, now, s.raw
	s.order = c.order
	s.mcp.SetTools(c.tools...)
	c.sent++
}

// flush applies a pending change now (its timer, or a host's tools/list).
func (s *session) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calm.pending && s.ctx.Err() == nil {
		s.setLocked(time.Now())
	}
}

// table is the (session, user) MCP servers a facade keeps: at most
// MaxSessions (the least recently used idle one makes room; a scan costs
// less than an order), swept of those idle longer than Idle.
type table struct {
	closing context.Context // the facade's: nothing is added once it ends
	idle    time.Duration
	max     int
	evicted *atomic.Int64 // MCP servers dropped (Facade.evicted)

	mu       sync.Mutex
	sessions map[key]*session
}

var errFull = errors.New("facade: too many MCP sessions in use; retry later")

func newTable(closing context.Context, idle time.Duration, max int, evicted *atomic.Int64) *table {
	return &table{closing: closing, idle: idle, max: max, evicted: evicted, sessions: map[key]*session{}}
}

func (t *table) use(k key) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[k]
	if s != nil {
		t.touchLocked(s, 1)
	}
	return s
}

// add keeps s as k's MCP server, counts a request on it and calls start,
// under the lock; it returns one made meanwhile instead, and errFull when
// max are kept and all are busy.
func (t *table) add(k key, s *session, start func()) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing.Err() != nil {
		return nil, fmt.Errorf("facade: closed")
	}
	if other, ok := t.sessions[k]; ok {
		t.touchLocked(other, 1)
		return other, nil
	}
	if len(t.sessions) >= t.max && !t.evictOneLocked() {
		return nil, errFull
	}
	t.sessions[k] = s
	t.touchLocked(s, 1)
	start()
	return s, nil
}

func (t *table) release(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touchLocked(s, -1)
}

func (t *table) touchLocked(s *session, delta int) {
	s.active += delta
	s.last = time.Now()
}

// busy reports whether s serves a request or holds a call waiting for its
// host user; it is not dropped then. Called with the table's mu held.
func (s *session) busy() bool { return s.active > 0 || s.confirms.busy() }

func (t *table) evictOneLocked() bool {
	var lru *session
	for _, s := range t.sessions {
		if !s.busy() && (lru == nil || s.last.Before(lru.last)) {
			lru = s
		}
	}
	if lru != nil {
		t.dropLocked(lru)
	}
	return lru != nil
}

// dropLocked forgets s and stops its polling. A client of it that comes
// back gets HTTP 404 for its MCP session id, and initialises again.
func (t *table) dropLocked(s *session) {
	k := key{s.id, s.user, s.policy, s.stdio}
	delete(t.sessions, k)
	s.cancel()
	t.evicted.Add(1)
}

func (t *table) sweep() {
	tk := time.NewTicker(max(min(t.idle/2, time.Minute), 10*time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-t.closing.Done():
			return
		case now := <-tk.C:
			t.dropIdle(now)
		}
	}
}

func (t *table) dropIdle(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.sessions {
		if now.Sub(s.last) > t.idle && !s.busy() {
			t.dropLocked(s)
		}
	}
}

// changed marks the listings of bus session id (every one for "") to be
// compared with the bus at once.
func (t *table) changed(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.sessions {
		if id == "" || s.id == id {
			select {
			case s.dirty <- struct{}{}:
			default:
			}
		}
	}
}

// The MCP grouping draft (SEP-2084, io.modelcontextprotocol/grouping) served
// from the session's groups (docs/mcp.md "Groups as MCP groups").
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

// serveOwn answers over HTTP what the facade answers itself (take); false
// leaves the request, body intact, to the next handler.
func (s *session) serveOwn(w http.ResponseWriter, r *http.Request, m *rpcMessage) bool {
	answer, ok := s.take(m)
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
	out := make([]mcpGroup, 0, len(list.Groups))
	for _, g := range list.Groups {
		out = append(out, mcpGroup{Name: g.Name, Description: g.Description,
			Meta: map[string]any{activeMetaKey: g.Active, scopeMetaKey: g.Scope}})
	}
	return response(m.ID, map[string]any{"groups": out}, nil)
}

// take takes a message the facade answers itself (grouping, or tasks when
// offered) and returns how it is answered; false passes it to mcp-go.
func (s *session) take(m *rpcMessage) (func(context.Context) []byte, bool) {
	switch {
	case !m.request():
	case m.Method == methodGroupsList || m.Method == methodGroupsActivate:
		return func(ctx context.Context) []byte { return s.groupsAnswer(ctx, m) }, true
	case !s.noTasks && isTaskMessage(m):
		return func(ctx context.Context) []byte { return s.tasks.answer(ctx, m) }, true
	}
	return nil, false
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
	res, err := s.calls.run(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: groups.ResetTools, Arguments: args}}, runOpts{})
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
