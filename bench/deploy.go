package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// Goroutine labels attributing CPU samples to the parts of an in-process
// deployment; spawned goroutines inherit them, nats-server's and the
// runtime's carry none.
const (
	labelKey   = "toolbus_bench"
	partRouter = "router" // the toolbus router, or the raw forwarder
	partWorker = "worker" // the toolbus worker, or the raw responder
	partClient = "client" // the agent's client and the measuring loops
	partOther  = "other"  // nats-server (in process), GC, everything unlabeled
)

// Names used by the deployment.
const (
	benchGroup = "bench"
	toolRead   = "echo"      // trivial read-only tool
	toolWrite  = "put"       // trivial non-read-only tool (dedupe ledger)
	toolParked = "ask_human" // external tool
	toolSleep  = "sleep5"    // I/O-bound tool, 5 ms
	sleepFor   = 5 * time.Millisecond
	rawEcho    = "bench.raw.echo"
	rawRelay   = "bench.raw.relay"
	rawBack    = "bench.raw.back."
	readyBound = 20 * time.Second
	childStop  = 20 * time.Second // bounds a child's orderly exit after its stdin closes
)

// Pending limits of the bench's own subscriptions: the router's, so the
// stand-ins buffer no more than it would before a slow-consumer drop.
const (
	pendingMsgs  = 4096
	pendingBytes = 64 << 20
)

// benchInput is the input of every trivial call; it passes the tools'
// schema {"text": string, required}.
var benchInput = json.RawMessage(`{"text":"hello"}`)

var benchGroups = []bus.Group{{Name: benchGroup, Description: "Benchmark tools.", Scope: bus.ScopeMeta}}

// Roles of the deployment's parts (and of the bench's
// child processes).
const (
	roleNATS      = "nats"      // nats-server with JetStream (the embedded one)
	roleRouter    = "router"    // one toolbus router, configured as cmd/router's defaults
	roleRelay     = "relay"     // the raw forwarder of the relay baseline
	roleWorker    = "worker"    // the toolbus worker, its collector tuned as cmd/toolworker's
	roleResponder = "responder" // the raw responder, apart: Go's default collector, as the raw baselines'
	roleMCP       = "mcp"       // mcp-go's streamable HTTP server with the same trivial tool
	roleClient    = "client"    // the bench process: the callers
	roleMachine   = "machine"   // every process on the machine (CPUNS only)
)

// config describes a deployment (nats-server, one router, the relay
// forwarder, the raw responder, the worker, optionally mcp-go's server),
// in this process, each part labelled, or each part a process.
type config struct {
	exe        string              // "": every part in this process; else the binary run as each part (RunChild)
	cluster    bool                // in this process: a 3-node cluster with replicas 3
	sessions   int                 // sessions with the bench group active, one per caller
	mcpClients int                 // > 0: mcp-go's server, and that many clients here
	profiles   map[string][]string // processes: by role, the only files it may write CPU profiles to
}

// deployment is a running config.
type deployment struct {
	cfg      config
	x        *xtest.Deployment       // in this process: the server(s) and the router
	children map[string]*Process     // as processes: by role
	undo     []func(context.Context) // stops the parts started in this process
	dir, url string

	ctl      *nats.Conn // status, KV and control requests
	rawNC    *nats.Conn // the raw requester
	clientNC *nats.Conn
	client   *client.Client
	payload  []byte // raw request and reply payload: an encoded batch event
	sessions []string
	mcp      *mcpHTTP // nil without mcp-go
	sleepers int      // workers of the I/O-bound tool, in this process
	prof     profiler // this process's (the client's) CPU profiles
}

// labelled runs fn with the goroutine label of part; connections and
// goroutines created inside keep it.
func labelled(ctx context.Context, part string, fn func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(labelKey, part), fn)
}

// deploy starts cfg in dependency order, waits until the router lists the
// worker's tools live and activates the bench group in cfg.sessions
// sessions.
func deploy(ctx context.Context, cfg config) (d *deployment, err error) {
	d = &deployment{cfg: cfg, children: map[string]*Process{}}
	defer func() {
		if err != nil {
			d.close(ctx)
			d = nil
		}
	}()
	if cfg.exe == "" {
		// One router with the bench meta group, the default heartbeat (as
		// deployed), connections that do not reconnect, every part labelled.
		d.x, err = xtest.Start(ctx, xtest.Config{Cluster: cfg.cluster, Routers: 1, Heartbeat: bus.DefaultHeartbeat, Bound: readyBound,
			Router: router.Config{Groups: benchGroups}, Options: []nats.Option{nats.MaxReconnects(0)}, Around: labelled})
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		d.url = d.x.URL(0)
	} else {
		if d.dir, err = os.MkdirTemp("", "toolbus-xbench-*"); err != nil {
			return nil, err
		}
		if d.url, err = d.start(ctx, roleNATS, envDir+"="+d.dir); err != nil {
			return nil, err
		}
		if _, err = d.start(ctx, roleRouter); err != nil {
			return nil, err
		}
	}
	for _, role := range []string{roleRelay, roleResponder, roleWorker} {
		if _, err = d.start(ctx, role); err != nil {
			return nil, err
		}
	}
	if cfg.mcpClients > 0 {
		d.mcp = &mcpHTTP{}
		url, err := d.start(ctx, roleMCP)
		if err == nil {
			err = d.mcp.connect(ctx, url, cfg.mcpClients)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		nc   **nats.Conn
		part string
	}{{&d.ctl, partOther}, {&d.rawNC, partClient}, {&d.clientNC, partClient}} {
		labelled(ctx, c.part, func(context.Context) {
			*c.nc, err = nats.Connect(d.url, nats.Name("toolbus-bench-"+c.part), nats.MaxReconnects(0))
		})
		if err != nil {
			return nil, err
		}
	}
	d.client = client.New(d.clientNC, client.Config{Source: "bench/agent"})
	if d.payload, err = rawPayload(); err != nil {
		return nil, err
	}
	if err = d.waitLive(ctx, toolRead, toolWrite, toolParked); err != nil {
		return nil, err
	}
	d.sessions, err = prepareSessions(ctx, d.client, cfg.sessions)
	return d, err
}

// partOf is the label of a role's part in this process.
var partOf = map[string]string{roleRelay: partRouter, roleResponder: partWorker, roleWorker: partWorker}

// start starts role, as a process (env added to its environment) or in
// this process under its part's label, and returns what it said on its
// ready line.
func (d *deployment) start(ctx context.Context, role string, env ...string) (extra string, err error) {
	if d.cfg.exe != "" {
		env = append(os.Environ(), append(env, envChild+"="+role, envURL+"="+d.url)...)
		if files := d.cfg.profiles[role]; len(files) > 0 {
			env = append(env, envProfiles+"="+strings.Join(files, string(os.PathListSeparator)))
		}
		c, err := StartProcess(ctx, ProcessSpec{Path: d.cfg.exe, Env: env, Bound: readyBound, Stdin: true,
			Ready: func(line string) (string, bool) {
				rest, ok := strings.CutPrefix(line, childReady)
				return strings.TrimSpace(rest), ok
			}})
		if err != nil {
			return "", fmt.Errorf("bench: %s process: %w", role, err)
		}
		d.children[role] = c
		return c.Extra, nil
	}
	var stop func(context.Context)
	labelled(ctx, partOf[role], func(ctx context.Context) { stop, extra, err = startPart(ctx, role, d.url, nil) })
	if err == nil {
		d.undo = append(d.undo, stop)
	}
	return extra, err
}

// rawPayload is the raw paths' request and reply: an encoded batch event.
func rawPayload() ([]byte, error) {
	ev, err := bus.NewEvent(bus.TypeCallBatch, "bench/agent", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: toolRead, Input: benchInput}}})
	if err != nil {
		return nil, err
	}
	ev.SessionID = "bench-0"
	return ev.Encode()
}

// status asks the router for its P.admin.status on the control connection.
func (d *deployment) status(ctx context.Context) (st bus.Status, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = client.New(d.ctl, client.Config{Source: "bench/agent"}).Admin(ctx, "status", "", nil, &st)
	return st, err // st after the call: in one return, the order of the two is unspecified
}

// pollStatus asks for the router's status until ok accepts it, within
// readyBound.
func (d *deployment) pollStatus(ctx context.Context, ok func(bus.Status) error) error {
	return Poll(ctx, readyBound, 10*time.Millisecond, func() error {
		st, err := d.status(ctx)
		if err != nil {
			return err
		}
		return ok(st)
	})
}

// waitLive waits until the router lists names live.
func (d *deployment) waitLive(ctx context.Context, names ...string) error {
	return d.pollStatus(ctx, func(st bus.Status) error { return st.CheckLive(names...) })
}

// Poll calls fn every interval until it returns nil, ctx ends or bound
// has passed; then it returns fn's last error.
func Poll(ctx context.Context, bound, interval time.Duration, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// addSleepers grows the sleep5 workers, in this process, to n, each on
// its own connection and limited to one call at a time.
func (d *deployment) addSleepers(ctx context.Context, n int) error {
	for ; d.sleepers < n; d.sleepers++ {
		nc, err := childConnect(d.url, "sleeper")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		w, err := StartWorker(ctx, nc, worker.Config{MaxConcurrent: 1}, func(w *worker.Worker) error {
			def := bus.ToolDef{Name: toolSleep, Description: "Wait 5 ms (I/O-bound).", ReadOnly: true}
			return worker.Register(w, def, func(ctx context.Context, _ *worker.Call, in textIn) (string, error) {
				return in.Text, bus.Sleep(ctx, sleepFor)
			})
		})
		if err != nil {
			nc.Close()
			return fmt.Errorf("bench: %w", err)
		}
		d.undo = append(d.undo, func(ctx context.Context) { drain(ctx, w.Drain); nc.Close() })
	}
	return d.waitLive(ctx, toolSleep)
}

// subscribe subscribes h to subject in queue with the bench's pending
// limits.
func subscribe(nc *nats.Conn, subject, queue string, h nats.MsgHandler) error {
	s, err := nc.QueueSubscribe(subject, queue, h)
	if err == nil {
		err = s.SetPendingLimits(pendingMsgs, pendingBytes)
	}
	return err
}

// prepareSessions activates the bench group, through reset_tools calls, in
// n sessions, one per caller, and returns them.
func prepareSessions(ctx context.Context, c *client.Client, n int) ([]string, error) {
	sessions := make([]string, n)
	for i := range sessions {
		sessions[i] = "bench-" + strconv.Itoa(i)
	}
	return sessions, parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		reply, err := c.Call(ctx, sessions[i], bus.Batch{Calls: []bus.Call{{ID: "r1", Name: groups.ResetTools,
			Input: json.RawMessage(`{"` + benchGroup + `":true}`)}}})
		if err != nil {
			return fmt.Errorf("bench: reset_tools: %w", err)
		}
		return checkReply(reply, 1)
	})
}

// checkReply returns an error unless the reply holds n successful results.
func checkReply(r *bus.Reply, n int) error {
	if len(r.Results) != n {
		return fmt.Errorf("bench: %d results for %d calls (parked %d)", len(r.Results), n, len(r.Parked))
	}
	for _, res := range r.Results {
		if res.State != bus.StateSuccess {
			msg := ""
			if len(res.Output) > 0 {
				msg = res.Output[0].Text
			}
			return fmt.Errorf("bench: call %s of %s: %s: %s", res.ID, res.Name, res.State, msg)
		}
	}
	return nil
}

// parallel runs fn(i) for i < n on at most width goroutines and returns the
// first error.
func parallel(ctx context.Context, n, width int, fn func(context.Context, int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(width)
	for i := 0; i < n && gctx.Err() == nil; i++ {
		g.Go(func() error { return fn(gctx, i) })
	}
	return cmp.Or(g.Wait(), ctx.Err())
}

// The measured calls; each takes the caller's index, which picks its
// session.

// raw requests subject with the raw payload: rawEcho is one_hop, rawRelay
// the relay.
func (d *deployment) raw(subject string) callFunc {
	return func(ctx context.Context, _ int) error {
		_, err := d.rawNC.RequestWithContext(ctx, subject, d.payload)
		return err
	}
}

// callTool calls tool once in the caller's session and checks the reply
// holds one success.
func (d *deployment) callTool(tool string) callFunc {
	return func(ctx context.Context, i int) error {
		reply, err := d.client.Call(ctx, d.sessions[i%len(d.sessions)], bus.Batch{Calls: []bus.Call{{ID: "c1", Name: tool, Input: benchInput}}})
		if err != nil {
			return err
		}
		return checkReply(reply, 1)
	}
}

// close stops the callers' connections and the parts in reverse order of
// their start, and removes the store; each drain is bounded even when ctx
// has ended.
func (d *deployment) close(ctx context.Context) {
	if d.mcp != nil {
		d.mcp.close(ctx)
	}
	for _, nc := range []*nats.Conn{d.clientNC, d.rawNC, d.ctl} {
		if nc != nil {
			nc.Close()
		}
	}
	for i := len(d.undo) - 1; i >= 0; i-- {
		d.undo[i](ctx)
	}
	for _, role := range []string{roleMCP, roleWorker, roleResponder, roleRelay, roleRouter, roleNATS} {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), childStop)
		_ = d.children[role].Stop(sctx)
		cancel()
	}
	if d.x != nil {
		d.x.Close()
	}
	if d.dir != "" {
		_ = os.RemoveAll(d.dir)
	}
}

// childErrors returns what the children said on stderr, for a failed run.
func (d *deployment) childErrors() string {
	var b strings.Builder
	for _, role := range []string{roleNATS, roleRouter, roleRelay, roleResponder, roleWorker, roleMCP} {
		if c := d.children[role]; c != nil {
			if s := c.Tail(); s != "" {
				fmt.Fprintf(&b, "%s: %s\n", role, s)
			}
		}
	}
	return b.String()
}

// stats asks one part for its costs so far (in this process: the whole
// process's).
func (d *deployment) stats(ctx context.Context, role string, req ctlRequest) (st childStats, err error) {
	if d.cfg.exe == "" || role == roleClient {
		if d.prof.allowed = d.cfg.profiles[roleClient]; req.Profile != nil {
			err = d.prof.toggle(*req.Profile)
		}
		return readStats(req.GC), err
	}
	body, _ := json.Marshal(req)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := d.ctl.RequestWithContext(rctx, ctlSubject(role), body)
	if err == nil {
		err = json.Unmarshal(m.Data, &st)
	}
	if err != nil {
		return st, fmt.Errorf("bench: %s stats: %w", role, err)
	}
	if st.Err != "" {
		return st, fmt.Errorf("bench: %s: %s", role, st.Err)
	}
	return st, nil
}

// mcpHTTP is mcp-go's streamable HTTP server on loopback serving the same
// trivial tool, and one mcp-go client per caller, each with its own session
// and its own HTTP connection pool (as separate agents would have).
type mcpHTTP struct {
	hs         *http.Server
	served     sync.WaitGroup
	streamable *mcpserver.StreamableHTTPServer
	clients    []*mcpclient.Client
	transports []*http.Transport
	closeOnce  sync.Once
}

// serve starts the server on a loopback port and returns its URL.
func (m *mcpHTTP) serve() (string, error) {
	s := mcpserver.NewMCPServer("toolbus-bench", "1.0.0", mcpserver.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool(toolRead, mcp.WithDescription("Echo the text (read-only)."),
		mcp.WithString("text", mcp.Required(), mcp.Description("Text to echo back.")),
		mcp.WithReadOnlyHintAnnotation(true)),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			text, err := req.RequireString("text")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			return mcp.NewToolResultText(text), nil
		})
	m.streamable = mcpserver.NewStreamableHTTPServer(s, mcpserver.WithStreamableHTTPLogger(slog.New(slog.DiscardHandler)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: mcp listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", m.streamable)
	m.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.served.Go(func() {
		if err := m.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Debug("bench: mcp server", "err", err)
		}
	})
	return "http://" + ln.Addr().String() + "/mcp", nil
}

// connect starts n initialized clients of the server at url.
func (m *mcpHTTP) connect(ctx context.Context, url string, n int) error {
	for range n {
		tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}
		m.transports = append(m.transports, tr)
		c, err := mcpclient.NewStreamableHttpClient(url, transport.WithHTTPBasicClient(&http.Client{Transport: tr}))
		if err != nil {
			return fmt.Errorf("bench: mcp client: %w", err)
		}
		m.clients = append(m.clients, c)
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("bench: mcp client start: %w", err)
		}
		req := mcp.InitializeRequest{}
		req.Params.ClientInfo = mcp.Implementation{Name: "toolbus-bench", Version: "1.0.0"}
		if _, err := c.Initialize(ctx, req); err != nil {
			return fmt.Errorf("bench: mcp initialize: %w", err)
		}
	}
	return nil
}

// call calls the tool through client i.
func (m *mcpHTTP) call(ctx context.Context, i int) error {
	var req mcp.CallToolRequest
	req.Params.Name = toolRead
	req.Params.Arguments = map[string]any{"text": "hello"}
	res, err := m.clients[i%len(m.clients)].CallTool(ctx, req)
	if err != nil {
		return fmt.Errorf("bench: mcp call: %w", err)
	}
	if res.IsError {
		return fmt.Errorf("bench: mcp call: tool error %v", res.Content)
	}
	return nil
}

// close stops the clients and the server; it is safe to call twice.
func (m *mcpHTTP) close(ctx context.Context) {
	m.closeOnce.Do(func() {
		for _, c := range m.clients {
			_ = c.Close()
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), xtest.StopTimeout)
		defer cancel()
		if m.streamable != nil {
			_ = m.streamable.Shutdown(ctx)
		}
		if m.hs != nil {
			_ = m.hs.Shutdown(ctx)
			m.served.Wait()
		}
		for _, tr := range m.transports {
			tr.CloseIdleConnections()
		}
	})
}
