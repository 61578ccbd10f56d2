// Package bridge serves MCP servers' tools on the bus as
// mcp__<server>__<tool> (docs/protocol.md 12, docs/mcp.md), one worker per
// server, so a server that fails withdraws only its own tools while it is
// reconnected with backoff.
package bridge

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/worker"
)

// Config configures a Bridge.
type Config struct {
	// ID starts the instance ids of the bridge's workers
	// (<ID>-<server>-<n>); "" means a random one.
	ID string
	// Prefix is the deployment's subject prefix; "" means bus.DefaultPrefix.
	Prefix string
	// Heartbeat is the workers' registration interval; zero means
	// bus.DefaultHeartbeat.
	Heartbeat time.Duration
	// MaxConcurrent bounds each server's calls at once; zero means 64.
	MaxConcurrent int
	// Ping is how often a connected server is pinged to notice one that
	// died; zero means 5s. A ping waits at most PingTimeout (zero: 5s).
	Ping, PingTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnections,
	// doubling from one to the other; zero means 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Grace is how long a disconnected server's tools stay registered
	// while it is reconnected (calls meanwhile wait for the server); zero
	// means 10s, negative withdraws at once.
	Grace time.Duration
	// Roots are the roots every server without its own is told
	// (roots/list): directories or file:// URIs, typically the worker's
	// --workdir; none: an empty list.
	Roots []string
	// MaxMessage is the largest JSON-RPC message read from a server, in
	// bytes; zero means DefaultMaxMessage.
	MaxMessage int64
	// Logger receives the bridge's logs; nil discards.
	Logger *slog.Logger
}

// Bridge connects the servers of a File and serves their tools. Start it
// once; Stop is safe to call twice.
type Bridge struct {
	links []*link

	subs     []*nats.Subscription // the resources verb, one per server
	life     *life.Life           // the links run as its loops
	stopOnce sync.Once
}

// New returns a Bridge for the servers of f (validated here).
func New(nc *nats.Conn, f *File, cfg Config) (*Bridge, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	cfg.ID = cmp.Or(cfg.ID, nuid.Next())
	if !bus.ValidID(cfg.ID) || len(cfg.ID) > 64 {
		return nil, fmt.Errorf("bridge: id %q must match ^[A-Za-z0-9_-]{1,64}$", cfg.ID)
	}
	orDefault(&cfg.Ping, 5*time.Second)
	orDefault(&cfg.PingTimeout, 5*time.Second)
	orDefault(&cfg.MinBackoff, 100*time.Millisecond)
	orDefault(&cfg.MaxBackoff, 30*time.Second)
	orDefault(&cfg.MaxMessage, DefaultMaxMessage)
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	cfg.Grace = cmp.Or(cfg.Grace, 10*time.Second) // negative: withdraw at once
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Bridge{life: life.New(life.Config{Logger: cfg.Logger})}
	// The bridge's client asks on the servers' behalf (ask.go).
	bc := client.New(nc, client.Config{Prefix: cfg.Prefix, Source: "toolbus/bridge/" + cfg.ID})
	for i := range f.Servers {
		b.links = append(b.links, newLink(nc, bc, cfg, f.Groups, &f.Servers[i]))
	}
	return b, nil
}

func orDefault[T int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// newLink makes server s's link and wires its parts: the one place that
// knows both the bridge and the link (docs/mcp.md "Structure").
func newLink(nc *nats.Conn, bc *client.Client, cfg Config, groups []bus.Group, s *Server) *link {
	log := cfg.Logger.With("mcp_server", s.Name)
	l := &link{nc: nc, cfg: cfg, groups: groups, s: s, log: log, fail: make(chan struct{}, 1), refresh: make(chan struct{}, 1),
		wake: make(chan struct{}), progress: map[string]*inflight{}}
	l.asks = &asker{s: s, defaultRoots: cfg.Roots, bus: bc, origin: l.origin, questions: make(chan struct{}, maxQuestions), log: log}
	l.res = &resourceServer{s: s, nc: nc, prefix: cfg.Prefix, id: cfg.ID, conn: l.connection, readers: make(chan struct{}, maxReaders), log: log}
	l.calls = &caller{s: s, conn: l.connection, track: l.track, lost: func() { signal(l.fail) }, retry: cfg.Grace > 0, log: log}
	return l
}

// Start connects every server in the background and returns at once;
// servers that cannot be reached yet are retried with backoff.
func (b *Bridge) Start(ctx context.Context) error {
	for _, l := range b.links {
		sub, err := l.res.serveResources(b.life.Context())
		if err != nil {
			b.unsubscribe()
			return fmt.Errorf("bridge: resources of %s: %w", l.s.Name, err)
		}
		b.subs = append(b.subs, sub)
	}
	for _, l := range b.links {
		b.life.Loop(l.run)
	}
	return nil
}

// Drain disconnects every server and withdraws its tools, waiting for them
// until ctx ends (internal/life). It is safe to call twice and
// concurrently.
func (b *Bridge) Drain(ctx context.Context) error {
	b.stopOnce.Do(b.unsubscribe)
	return b.life.Drain(ctx)
}

// Stop is Drain.
func (b *Bridge) Stop(ctx context.Context) error { return b.Drain(ctx) }

// Closed is closed once Drain (or Stop) has returned.
func (b *Bridge) Closed() <-chan struct{} { return b.life.Closed() }

func (b *Bridge) unsubscribe() {
	for _, s := range b.subs {
		_ = s.Unsubscribe()
	}
	b.subs = nil
}

// link is one server: it owns the connection's lifecycle (connect, list
// and register, ping, reconnect within the grace); its parts serve what
// runs over it.
type link struct {
	nc     *nats.Conn
	cfg    Config      // the bridge's
	groups []bus.Group // the file's, sent with the worker's registration
	s      *Server
	log    *slog.Logger

	asks  *asker          // ask.go
	res   *resourceServer // resources.go
	calls *caller         // the tools' bus calls (handler, task.go)

	fail, refresh chan struct{}

	// pub serialises changing the worker: publish and the grace period's
	// withdrawal.
	pub sync.Mutex

	mu       sync.Mutex
	wake     chan struct{} // closed and replaced when cl or w changes
	unknown  []string      // enable_tools/disable_tools names the server lacks
	epoch    int           // counts disconnections
	cl       *mcpclient.Client
	w        *worker.Worker
	defs     []bus.ToolDef
	gen      int
	progress map[string]*inflight // progress token → call
}

// inflight is a bus call the server runs, with its context and the gate its
// progress goes through.
type inflight struct {
	call *worker.Call
	ctx  context.Context
	gate *progressGate
}

var errFailed = errors.New("the server failed")

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run keeps the server connected until ctx ends.
func (l *link) run(ctx context.Context) {
	backoff := l.cfg.MinBackoff
	for {
		// Drop a failure signalled by the previous connection.
		select {
		case <-l.fail:
		default:
		}
		connected, err := l.session(ctx)
		switch {
		case ctx.Err() != nil || l.cfg.Grace < 0:
			l.stopWorker(ctx)
		case connected:
			// The grace period runs from the disconnection; failed
			// attempts to reconnect do not extend it.
			l.graceful(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = l.cfg.MinBackoff
		}
		l.log.Warn("bridge: MCP server disconnected; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, l.cfg.MaxBackoff)
	}
}

// session connects, registers the server's tools and serves until the
// server fails or ctx ends; connected: it got as far as registering.
func (l *link) session(ctx context.Context) (connected bool, err error) {
	tr, err := newTransport(l.s, l.cfg.MaxMessage, slog.New(quiet{l.log.Handler()}))
	if err != nil {
		return false, err
	}
	// The revisions of initialize (up to 2025-11-25) have ping, the
	// standalone stream and cancellation, and every server still answers.
	opts := []mcpclient.ClientOption{mcpclient.WithLegacyProtocolOnly()}
	if l.s.Transport != TransportSSE {
		// mcp-go's SSE client cannot answer a server's requests: declaring
		// capabilities there would leave the server waiting.
		opts = append(opts, l.asks.clientOptions()...)
	}
	cl := mcpclient.NewClient(tr, opts...)
	cl.OnNotification(l.onNotification)
	cl.OnConnectionLost(func(error) { signal(l.fail) })
	defer func() {
		l.mu.Lock()
		if l.cl == cl {
			l.cl = nil
			l.wakeLocked()
		}
		l.mu.Unlock()
		_ = cl.Close()
	}()
	// Start gets ctx itself: a stdio server lives as long as it.
	if err := cl.Start(ctx); err != nil {
		return false, fmt.Errorf("start: %w", err)
	}
	ictx, cancel := context.WithTimeout(ctx, l.s.setupTimeout())
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: "toolbus-bridge", Version: "1.0.0"}
	req.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	_, err = cl.Initialize(ictx, req)
	cancel()
	if err != nil {
		return false, fmt.Errorf("initialize: %w", err)
	}
	l.mu.Lock()
	l.cl = cl
	l.wakeLocked()
	l.mu.Unlock()
	if err := l.publish(ctx, cl); err != nil {
		return false, err
	}
	l.log.Info("bridge: MCP server connected", "tools", len(l.defs))
	ping := time.NewTicker(l.cfg.Ping)
	defer ping.Stop()
	last, listed := time.Now(), time.Now() // when the last ping was sent, the tools last listed
	var relist <-chan time.Time            // a list_changed put off to refreshEvery after the last listing
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-l.fail:
			return true, errFailed
		case <-l.refresh:
			if relist == nil {
				relist = time.After(time.Until(listed.Add(refreshEvery)))
			}
		case <-relist:
			relist, listed = nil, time.Now()
			if err := l.publish(ctx, cl); err != nil {
				return true, err
			}
		case <-ping.C:
			sent := time.Now()
			pctx, cancel := context.WithTimeout(ctx, l.cfg.PingTimeout)
			err := cl.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil && !busy(tr, err, last) {
				return true, fmt.Errorf("ping: %w", err)
			}
			last = sent
		}
	}
}

// busy reports whether a ping that failed with err only waited behind the
// server's other output: it timed out, and a stdio server wrote since the
// ping before it. A single-threaded server answers a ping only once a large
// result is out (a 6 MiB line under load took longer than PingTimeout).
func busy(tr transport.Interface, err error, last time.Time) bool {
	st, ok := tr.(*stdioTransport)
	return ok && errors.Is(err, context.DeadlineExceeded) && st.heardSince(last)
}

// checkNames warns once about names in enable_tools or disable_tools that
// no tool of the server has (a typo, or a tool renamed by a new version of
// the server), and keeps them to warn again only when they change.
func (l *link) checkNames(tools []mcp.Tool) {
	unknown := l.s.unknownNames(tools)
	l.mu.Lock()
	changed := !slices.Equal(unknown, l.unknown)
	l.unknown = unknown
	l.mu.Unlock()
	if changed && len(unknown) > 0 {
		l.log.Warn("bridge: enable_tools/disable_tools name tools the MCP server does not have", "names", unknown)
	}
}

// Unknown returns the names in the server's enable_tools and disable_tools
// that its last tools/list did not have (nil before it was listed).
func (b *Bridge) Unknown(server string) []string {
	for _, l := range b.links {
		if l.s.Name == server {
			l.mu.Lock()
			defer l.mu.Unlock()
			return slices.Clone(l.unknown)
		}
	}
	return nil
}

// graceful keeps a disconnected server's worker for the grace period, then
// withdraws it unless the server is connected again by then.
func (l *link) graceful(ctx context.Context) {
	l.mu.Lock()
	l.epoch++
	epoch := l.epoch
	l.mu.Unlock()
	time.AfterFunc(l.cfg.Grace, func() {
		l.pub.Lock()
		defer l.pub.Unlock()
		l.mu.Lock()
		down := l.cl == nil && l.epoch == epoch && l.w != nil
		l.mu.Unlock()
		if down {
			l.log.Warn("bridge: MCP server still down after the grace period; its tools are withdrawn", "grace", l.cfg.Grace)
			l.stopWorker(ctx)
		}
	})
}

// wakeLocked wakes the calls waiting for the server.
func (l *link) wakeLocked() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// connection returns the server's client, other than dead,
// waiting while the server is being reconnected with its tools still
// registered; nil when the tools were withdrawn or ctx ended first.
func (l *link) connection(ctx context.Context, dead *mcpclient.Client) *mcpclient.Client {
	for {
		l.mu.Lock()
		cl, w, wake := l.cl, l.w, l.wake
		l.mu.Unlock()
		if cl == dead {
			cl = nil
		}
		if cl != nil || w == nil {
			return cl
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil
		}
	}
}

// publish lists the server's tools and, when their definitions changed,
// replaces the server's worker.
func (l *link) publish(ctx context.Context, cl *mcpclient.Client) error {
	l.pub.Lock()
	defer l.pub.Unlock()
	lctx, cancel := context.WithTimeout(ctx, l.s.setupTimeout())
	res, err := cl.ListTools(lctx, mcp.ListToolsRequest{})
	cancel()
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	l.checkNames(res.Tools)
	var defs []bus.ToolDef
	seen := map[string]string{}
	for _, t := range res.Tools {
		if !l.s.bridged(t.Name) {
			continue
		}
		d, err := Definition(l.s, t)
		if err != nil {
			l.log.Error("bridge: tool left out", "tool", t.Name, "err", err)
			continue
		}
		if other, dup := seen[d.Name]; dup {
			l.log.Error("bridge: tool left out: its name is taken", "tool", t.Name, "name", d.Name, "by", other)
			continue
		}
		seen[d.Name] = t.Name
		defs = append(defs, d)
	}
	if len(defs) > MaxTools {
		l.log.Error("bridge: tools left out: the server lists more than the bridge takes (enable_tools picks them)", "bridged", MaxTools, "left_out", len(defs)-MaxTools)
		defs = defs[:MaxTools]
	}
	l.mu.Lock()
	same := l.w != nil && slices.EqualFunc(l.defs, defs, func(a, b bus.ToolDef) bool { return a.Equal(&b) })
	l.mu.Unlock()
	if same {
		return nil
	}
	l.stopWorker(ctx)
	if len(defs) == 0 {
		return nil
	}
	l.mu.Lock()
	l.gen++
	id := l.cfg.ID + "-" + l.s.Name + "-" + strconv.Itoa(l.gen)
	l.mu.Unlock()
	w, err := worker.New(l.nc, worker.Config{ID: id, Prefix: l.cfg.Prefix, Heartbeat: l.cfg.Heartbeat,
		MaxConcurrent: l.cfg.MaxConcurrent, Groups: l.groups, Logger: l.log})
	if err != nil {
		return err
	}
	for _, d := range defs {
		if err := w.Handle(d, l.calls.handler(d.MCP.Tool, d.MCP.TaskSupport == string(mcp.TaskSupportRequired), d.ReadOnly || d.Idempotent)); err != nil {
			return err
		}
	}
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	l.mu.Lock()
	l.w, l.defs = w, defs
	l.mu.Unlock()
	return nil
}

// stopWorker drains the server's worker for at most 30 s, even when ctx
// (the link's run) has ended.
func (l *link) stopWorker(ctx context.Context) {
	l.mu.Lock()
	w := l.w
	l.w, l.defs = nil, nil
	l.wakeLocked()
	l.mu.Unlock()
	if w == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := w.Drain(ctx); err != nil {
		l.log.Warn("bridge: worker stop", "err", err)
	}
}

func (l *link) onNotification(n mcp.JSONRPCNotification) {
	switch n.Method {
	case string(mcp.MethodNotificationToolsListChanged):
		signal(l.refresh)
	case string(mcp.MethodNotificationProgress):
		p := n.Params.AdditionalFields
		token := fmt.Sprint(p["progressToken"])
		l.mu.Lock()
		f := l.progress[token]
		l.mu.Unlock()
		if f == nil {
			return
		}
		f.gate.offer(progressText(p))
	}
}

// progressText renders an MCP progress notification: "message
// (progress/total)".
func progressText(f map[string]any) string {
	msg, _ := f["message"].(string)
	p := fmt.Sprint(f["progress"])
	if t, ok := f["total"]; ok && t != nil {
		p += "/" + fmt.Sprint(t)
	}
	if msg == "" {
		return "progress " + p
	}
	return msg + " (" + p + ")"
}

// caller runs the bus calls of a server's tools on its connection.
type caller struct {
	s     *Server
	conn  func(ctx context.Context, dead *mcpclient.Client) *mcpclient.Client // link.connection
	track func(token string, f *inflight) (untrack func())                    // link.track
	lost  func()                                                              // the connection failed: reconnect
	// retry: a read-only or idempotent call cut by a failed connection
	// runs once more on the new one (Config.Grace > 0).
	retry bool
	log   *slog.Logger
}

// track notes a call in flight under its progress token (its progress
// notifications and the server's requests find it) until untrack.
func (l *link) track(token string, f *inflight) (untrack func()) {
	l.mu.Lock()
	l.progress[token] = f
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.progress, token)
		l.mu.Unlock()
	}
}

// handler calls the MCP tool named tool, as a task when asTask (task.go);
// when retry, a call cut by a failed connection is made once more on the
// reconnected server.
func (cr *caller) handler(tool string, asTask, retry bool) worker.Handler {
	return func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
		var args map[string]any
		if len(c.Input) > 0 {
			if err := json.Unmarshal(c.Input, &args); err != nil {
				return nil, fmt.Errorf("input is not an object: %w", err)
			}
		}
		token := bus.CallKey(c.SessionID, c.ReplyID, c.ID) + "." + strconv.Itoa(c.Attempt) + "." + nuid.Next()
		// Progress is coalesced: at most one event every progressEvery,
		// the latest notice winning (a flood stores a few events).
		f := &inflight{call: c, ctx: ctx, gate: newProgressGate(progressEvery, func(text string) { _ = c.Progress(bus.Text(text)...) })}
		defer f.gate.close()
		defer cr.track(token, f)()
		req := mcp.CallToolRequest{}
		req.Params.Name = tool
		req.Params.Arguments = args
		req.Params.Meta = &mcp.Meta{ProgressToken: token}
		var dead *mcpclient.Client
		for attempt := 0; ; attempt++ {
			cl := cr.conn(ctx, dead)
			if cl == nil {
				return errorResult(fmt.Sprintf("Error: MCP server %q is not connected", cr.s.Name)), nil
			}
			rctx, ids := withRequestIDs(ctx, f)
			var res *mcp.CallToolResult
			var err error
			if asTask {
				res, err = cr.callTask(rctx, cl, req, c)
			} else {
				res, err = cl.CallTool(rctx, req)
			}
			if err == nil {
				return Result(res), nil
			}
			out, lost := cr.failed(ctx, cl.GetTransport(), ids, err)
			if lost && retry && attempt == 0 && cr.retry {
				dead = cl
				continue
			}
			return out, nil
		}
	}
}

// failed turns a failed MCP call into its result; lost: the connection
// failed (and cr.lost was called).
func (cr *caller) failed(ctx context.Context, tr transport.Interface, ids *requestIDs, err error) (_ *bus.ExecResult, lost bool) {
	// The SSE transport answers a deadline with its own time-out error a
	// moment before ctx reports it.
	if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
		// Cancelled (P.cancel) or past the deadline: tell an HTTP server to
		// stop; mcp-go already told a stdio one.
		cause := context.DeadlineExceeded
		if ctx.Err() != nil {
			cause = context.Cause(ctx)
		}
		if h, ok := tr.(*httpTransport); ok {
			h.cancel(ctx, ids, cause.Error(), cr.log)
		}
		return errorResult("Error: " + cause.Error()), false
	}
	if _, ok := errors.AsType[*transport.Error](err); ok || errors.Is(err, transport.ErrSessionTerminated) {
		cr.lost()
		return errorResult(fmt.Sprintf("Error: MCP server %q failed: %v", cr.s.Name, err)), true
	}
	return errorResult("Error: " + err.Error()), false
}

func errorResult(text string) *bus.ExecResult {
	return &bus.ExecResult{State: bus.StateError, Output: bus.Text(text)}
}
