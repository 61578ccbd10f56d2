package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// newTransport returns the server's MCP transport, reading at most limit
// bytes a message; HTTP transports send notifications/cancelled when a call's
// context ends (mcp-go does only over stdio).
func newTransport(s *Server, limit int64, log *slog.Logger) (transport.Interface, error) {
	var t transport.Interface
	var err error
	switch s.Transport {
	case TransportStdio:
		return newStdio(s, limit, log)
	case TransportSSE:
		t, err = transport.NewSSE(s.URL, transport.WithHeaders(s.Headers), transport.WithSSELogger(log),
			transport.WithHTTPClient(limitClient(limit)),
			// The tool's own timeout bounds a call, not the transport's 60s.
			transport.WithResponseTimeout(s.timeout+5*time.Second))
	default:
		// Continuous listening opens the GET stream on which the server's
		// notifications/tools/list_changed arrives between calls.
		t, err = transport.NewStreamableHTTP(s.URL, transport.WithHTTPHeaders(s.Headers), transport.WithContinuousListening(),
			transport.WithHTTPBasicClient(limitClient(limit)), transport.WithHTTPLogger(log))
	}
	if err != nil {
		return nil, err
	}
	return &httpTransport{Interface: t, url: s.URL, headers: s.Headers, log: log}, nil
}

// stdioTransport runs a stdio server itself, so that its output is read
// through a lineLimiter (mcp-go reads a whole line whatever its size), and
// speaks to it with mcp-go's transport over the command's pipes.
type stdioTransport struct {
	*transport.Stdio
	cmd    *exec.Cmd
	out    io.Closer     // our end of the server's stdout
	lim    *lineLimiter  // what reads it
	exited chan struct{} // closed once the started child was waited for
}

func newStdio(s *Server, limit int64, log *slog.Logger) (*stdioTransport, error) {
	cmd := exec.Command(s.Command, s.Args...)
	cmd.Env = serverEnv(os.Environ())
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		cmd.Env = append(cmd.Env, k+"="+s.Env[k])
	}
	cmd.Dir = s.Cwd // stderr: the null device
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		in.Close()
		cmd.Stdin.(io.Closer).Close() // the server's end: only Start or Wait would close it
		return nil, err
	}
	t := &stdioTransport{cmd: cmd, out: out, exited: make(chan struct{})}
	t.lim = newLineLimiter(out, limit, func(what string) {
		log.Error("bridge: the MCP server sent a message past the limit; refused", "what", what, "limit", limit)
	})
	t.Stdio = transport.NewIO(t.lim, in, io.NopCloser(strings.NewReader("")))
	transport.WithCommandLogger(log)(t.Stdio)
	return t, nil
}

// heardSince reports whether the server wrote anything after t.
func (t *stdioTransport) heardSince(at time.Time) bool {
	return t.lim.heard.Load() > at.UnixNano()
}

// Start starts the server, which lives as long as ctx (or until Close).
func (t *stdioTransport) Start(ctx context.Context) error {
	err := ctx.Err() // an ended ctx starts nothing (as exec.CommandContext would not)
	if err == nil {
		err = t.cmd.Start()
	}
	if err != nil {
		close(t.exited)
		return fmt.Errorf("failed to start command: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = t.cmd.Process.Kill() })
	go func() {
		_ = t.cmd.Wait() // closes the pipes
		stop()
		close(t.exited)
	}()
	return t.Stdio.Start(ctx)
}

// Close closes the transport (and so the server's stdin), then gives the
// server two seconds to exit before it is killed. Start and Close are
// called by the link's session, one after the other.
func (t *stdioTransport) Close() error {
	err := t.Stdio.Close()
	if t.cmd.Process == nil { // never started: the server's ends too (only Start or Wait would close them)
		t.out.Close()
		t.cmd.Stdin.(io.Closer).Close()
		t.cmd.Stdout.(io.Closer).Close()
		return err
	}
	select {
	case <-t.exited:
	case <-time.After(2 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.exited
	}
	return err
}

// serverEnv is the environment a stdio server inherits: the worker's,
// without its NATS_* settings (credentials, tokens, keys), which a
// third-party server must not read. A server's own env may set them.
func serverEnv(environ []string) []string {
	return slices.DeleteFunc(environ, func(kv string) bool { return strings.HasPrefix(kv, "NATS_") })
}

// httpTransport passes everything to an SSE or streamable HTTP transport
// and notes the JSON-RPC ids of the requests sent under a context made by
// withRequestIDs, so that the bridge can cancel them.
type httpTransport struct {
	transport.Interface
	url     string
	headers map[string]string
	log     *slog.Logger
	version atomic.Value // string: the negotiated protocol version
}

var (
	_ transport.HTTPConnection         = (*httpTransport)(nil)
	_ transport.BidirectionalInterface = (*httpTransport)(nil)
)

func (t *httpTransport) SendRequest(ctx context.Context, r transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if ids, ok := ctx.Value(requestIDsKey{}).(*requestIDs); ok {
		ids.add(r.ID)
	}
	return t.Interface.SendRequest(ctx, r)
}

func (t *httpTransport) SetProtocolVersion(v string) {
	t.version.Store(v)
	if h, ok := t.Interface.(transport.HTTPConnection); ok {
		h.SetProtocolVersion(v)
	}
}

// SetRequestHandler passes the server's requests to h. Elicitation and
// sampling requests are answered in the background, bounded by the bus call
// (ask.go), since mcp-go gives HTTP handlers only 30 seconds.
func (t *httpTransport) SetRequestHandler(h transport.RequestHandler) {
	sh, streamable := t.Interface.(*transport.StreamableHTTP)
	if !streamable { // SSE: mcp-go's handler as it is
		if b, ok := t.Interface.(transport.BidirectionalInterface); ok {
			b.SetRequestHandler(h)
		}
		return
	}
	sh.SetRequestHandler(func(ctx context.Context, r transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
		if r.Method != string(mcp.MethodElicitationCreate) && r.Method != string(mcp.MethodSamplingCreateMessage) {
			return h(ctx, r)
		}
		go func() {
			ctx := context.WithoutCancel(ctx)
			resp, err := h(ctx, r)
			if err != nil {
				resp = transport.NewJSONRPCErrorResponse(r.ID, mcp.INTERNAL_ERROR, err.Error(), nil)
			}
			if err := t.respond(ctx, sh.GetSessionId(), resp); err != nil && t.log != nil {
				t.log.Warn("bridge: response to the server's request not sent", "method", r.Method, "err", err)
			}
		}()
		return nil, nil
	})
}

func (t *httpTransport) respond(ctx context.Context, session string, resp *transport.JSONRPCResponse) error {
	body, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set(transport.HeaderKeySessionID, session)
	}
	if v, _ := t.version.Load().(string); v != "" {
		req.Header.Set(mcp.HeaderProtocolVersion, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusAccepted {
		return fmt.Errorf("the server answered HTTP %d", res.StatusCode)
	}
	return nil
}

func (t *httpTransport) SetConnectionLostHandler(h func(error)) {
	if s, ok := t.Interface.(interface{ SetConnectionLostHandler(func(error)) }); ok {
		s.SetConnectionLostHandler(h)
	}
}

// cancel sends notifications/cancelled for every request noted in ids,
// even when ctx (the cancelled call's) has ended.
func (t *httpTransport) cancel(ctx context.Context, ids *requestIDs, reason string, log *slog.Logger) {
	for _, id := range ids.list() {
		ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := t.Interface.SendNotification(ctx, mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION,
			Notification: mcp.Notification{Method: string(mcp.MethodNotificationCancelled),
				Params: mcp.NotificationParams{AdditionalFields: map[string]any{"requestId": id, "reason": reason}}}})
		if err != nil {
			log.Warn("bridge: notifications/cancelled not sent", "request", id, "err", err)
		}
		stop()
	}
}

type requestIDsKey struct{}

// requestIDs notes the JSON-RPC ids of one bus call's MCP requests, and
// the call, so that a request the server sends back on that call's stream
// is known to be the call's.
type requestIDs struct {
	call *inflight
	mu   sync.Mutex
	ids  []mcp.RequestId
}

func withRequestIDs(ctx context.Context, call *inflight) (context.Context, *requestIDs) {
	ids := &requestIDs{call: call}
	return context.WithValue(ctx, requestIDsKey{}, ids), ids
}

func (r *requestIDs) add(id mcp.RequestId) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
}

func (r *requestIDs) list() []mcp.RequestId {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// quiet passes only warnings and errors of mcp-go's transports to the
// bridge's logger (they log every reconnection of a stream at info).
type quiet struct{ slog.Handler }

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && q.Handler.Enabled(ctx, l)
}
func (q quiet) WithAttrs(a []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(a)} }
func (q quiet) WithGroup(n string) slog.Handler      { return quiet{q.Handler.WithGroup(n)} }
