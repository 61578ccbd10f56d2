package facade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
)

// maxCrossing bounds a message carried to another facade process; a larger
// one is answered where it landed.
const maxCrossing = 64 << 10

// crossRecord is a message carried to the facade process it belongs to,
// under x.<session>.<user digest>.<policy>.<MCP session digest>.<nuid>: put, delivered
// to the key's subscribers, and deleted at once (<policy> after the user
// digest since session 39: crossKey).
type crossRecord struct {
	MCPSession string          `json:"mcp_session"`
	Version    string          `json:"version,omitempty"`
	Message    json.RawMessage `json:"message"`
}

// clientRecord is what a 2025-11-25 client declared in its initialize, under
// m.<session>.<user digest>.<policy>.<MCP session digest>, for adopt.
type clientRecord struct {
	Version      string                 `json:"version"`
	Capabilities mcp.ClientCapabilities `json:"capabilities"`
	Info         mcp.Implementation     `json:"info"`
}

// crossing carries to the process that owns them the messages of a
// 2025-11-25 MCP session that reach another facade process: a client's
// answer to an elicitation and its notifications/cancelled (docs/mcp.md
// "Facade processes behind one address"). Keys name the bus session, the
// authenticated user and the confirm policy, so a message only reaches the
// same (session, user, policy).
type crossing struct {
	nc      *nats.Conn
	store   *kvStore
	session string
	user    string
	policy  Confirm
	local   func() http.Handler // the session's mcp-go streamable HTTP server
	log     *slog.Logger

	adoptMu sync.Mutex // one adoption at a time
	mu      sync.Mutex
	subs    map[string]*crossSub // by MCP session id
	known   map[string]bool      // MCP sessions initialised or adopted here (at most maxClients)
	// tag prefixes the ids of the requests this server sends ("<tag>.<n>"):
	// mcp-go numbers them from 1 in every process, so an answer bearing
	// another tag is carried to its process, not taken here.
	tag string
}

// maxClients bounds the MCP sessions one crossing remembers as known.
const maxClients = 1024

type crossSub struct {
	n    int
	stop context.CancelFunc
}

// response reports whether m is a JSON-RPC response with a result or an
// error (not an empty one: mcp-go answers those 202 itself).
func (m *rpcMessage) response() bool {
	return m.Method == "" && len(m.ID) > 0 && string(m.ID) != "null" &&
		(len(bytes.TrimSpace(m.Result)) > 0 || len(bytes.TrimSpace(m.Error)) > 0) &&
		!bytes.Equal(bytes.TrimSpace(m.Result), []byte("{}"))
}

// serveHTTP serves every request of a 2025-11-25 (or earlier) MCP session:
// it tags the ids of the requests sent to the client, carries answers of
// another process's tag, notifications/cancelled and answers its mcp-go
// has no question for to the following process, and adopts sessions it
// does not know. It reports false for a request of no MCP session.
func (x *crossing) serveHTTP(w http.ResponseWriter, r *http.Request, body []byte, p *rpcMessage) bool {
	sid := r.Header.Get(server.HeaderKeySessionID)
	if sid == "" || len(sid) > 256 || mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion)) {
		return false
	}
	w = &tagWriter{ResponseWriter: w, tag: x.tag}
	crosses := x.store.available(r.Context())
	if crosses && r.Method != http.MethodDelete {
		x.adopt(r.Context(), sid)
	}
	if p == nil { // not a POST of one JSON-RPC message
		x.local().ServeHTTP(w, r)
		return true
	}
	version := r.Header.Get(mcp.HeaderProtocolVersion)
	if tag, n, tagged := untagID(p.ID); tagged && p.response() {
		if tag != x.tag {
			// Another process asked (or none did): its follower takes it.
			x.carryAnswer(w, r, sid, body)
			return true
		}
		if body, ok := withID(body, n); ok {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		x.local().ServeHTTP(w, r)
		return true
	}
	switch {
	case !crosses:
	case p.Method == string(mcp.MethodToolsCall) && len(p.ID) > 0:
		stop := x.follow(r.Context(), sid)
		defer stop()
	case p.Method == string(mcp.MethodNotificationCancelled) && len(p.ID) == 0:
		// mcp-go cancels the request when it is this process's; the
		// crossing reaches the process that runs it otherwise.
		_ = x.carry(r.Context(), sid, version, body)
	case p.response():
		// Untagged: asked by a facade that does not tag its ids (an older
		// one), here or on another process.
		rec := httptest.NewRecorder()
		x.local().ServeHTTP(rec, r)
		if rec.Code < 400 || rec.Code >= 500 || len(body) > maxCrossing {
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return true
		}
		x.carryAnswer(w, r, sid, body)
		return true
	}
	x.local().ServeHTTP(w, r)
	return true
}

// carryAnswer carries body, the client's answer to another process's
// request, and answers 202 (503 when it cannot be carried).
func (x *crossing) carryAnswer(w http.ResponseWriter, r *http.Request, sid string, body []byte) {
	if err := x.carry(r.Context(), sid, r.Header.Get(mcp.HeaderProtocolVersion), body); err != nil {
		writeHTTPError(w, http.StatusServiceUnavailable, "facade: the answer could not be passed to the facade process that asked: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// remember records what the client of the MCP session in ctx declared
// (the initialize hook); adopt's own initialize, marked with adoptHeader, is
// not recorded again. The record is a new key, refused past P_mcp's soft
// bound as a new task is (kvStore.put): the MCP session is then served by
// this process only, as without the bucket (other processes do not adopt it).
func (x *crossing) remember(ctx context.Context, req *mcp.InitializeRequest) {
	cs := server.ClientSessionFromContext(ctx)
	if cs == nil || cs.SessionID() == "" || req == nil || req.Header.Get(adoptHeader) != "" || !x.store.available(ctx) {
		return
	}
	x.mu.Lock()
	keepBounded(&x.known, cs.SessionID(), true, maxClients)
	x.mu.Unlock()
	rec := clientRecord{Version: req.Params.ProtocolVersion, Capabilities: req.Params.Capabilities, Info: req.Params.ClientInfo}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := x.store.put(ctx, x.crossKey("m", cs.SessionID()), rec, true); err != nil {
		x.log.Warn("facade: an MCP session's client could not be recorded for the other processes", "session", x.session, "err", err)
	}
}

// adopt registers MCP session sid, initialised on another process, with
// this process's mcp-go server by replaying its initialize (remember), so
// its later requests find their capabilities here. Without the record
// nothing is adopted.
func (x *crossing) adopt(ctx context.Context, sid string) {
	x.adoptMu.Lock()
	defer x.adoptMu.Unlock()
	x.mu.Lock()
	known := x.known[sid]
	x.mu.Unlock()
	if known {
		return
	}
	var rec clientRecord
	if x.store.get(ctx, x.crossKey("m", sid), &rec) != nil || rec.Version == "" {
		return
	}
	init, _ := json.Marshal(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "id": "toolbus-adopt", "method": mcp.MethodInitialize,
		"params": map[string]any{"protocolVersion": rec.Version, "capabilities": rec.Capabilities, "clientInfo": rec.Info}})
	if code := x.inject(sid, "", init, true); code != http.StatusOK {
		x.log.Debug("facade: an MCP session of another process not adopted", "session", x.session, "status", code)
		return
	}
	x.inject(sid, rec.Version, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), false)
	x.mu.Lock()
	keepBounded(&x.known, sid, true, maxClients)
	x.mu.Unlock()
}

// inject serves a message of MCP session sid to this process's mcp-go as if
// posted to it (adopting: the initialize), returning the HTTP status.
func (x *crossing) inject(sid, version string, body []byte, adopting bool) int {
	req, err := http.NewRequest(http.MethodPost, "/mcp/"+x.session, bytes.NewReader(body))
	if err != nil {
		return http.StatusInternalServerError
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if adopting {
		req.Header.Set(adoptHeader, sid)
	} else {
		req.Header.Set(server.HeaderKeySessionID, sid)
	}
	if version != "" {
		req.Header.Set(mcp.HeaderProtocolVersion, version)
	}
	rr := httptest.NewRecorder()
	x.local().ServeHTTP(rr, req)
	return rr.Code
}

// adoptHeader marks adopt's initialize; Handler removes it from every
// request it is sent.
const adoptHeader = "X-Toolbus-Adopt-Session"

// adoptResolver gives mcp-go's streamable HTTP server its session ids:
// generated and not validated (any process takes any session's
// requests), but adopt's initialize gets the adopted session's.
type adoptResolver struct{}

func (adoptResolver) ResolveSessionIdManager(r *http.Request) server.SessionIdManager {
	if r != nil {
		if sid := r.Header.Get(adoptHeader); sid != "" {
			return adoptedID(sid)
		}
	}
	return &server.StatelessGeneratingSessionIdManager{}
}

type adoptedID string

func (a adoptedID) Generate() string                              { return string(a) }
func (adoptedID) Validate(string) (isTerminated bool, err error)  { return false, nil }
func (adoptedID) Terminate(string) (isNotAllowed bool, err error) { return false, nil }

// crossKey is the key of kind (x: the prefix of the carried messages, m:
// the client record) of the (session, user, policy)'s MCP session sid. The
// policy keeps a token of the user under approvers, which never confirms,
// from carrying an answer to the confirmation of a host_user session whose
// MCP session id it learnt (TestAttackCrossingAcrossPolicies).
func (x *crossing) crossKey(kind, sid string) string {
	return userKey(kind, x.session, x.user, string(x.policy), digest(sid))
}

// carry puts body where the process following MCP session sid gets it,
// under a new key: refused past P_mcp's soft bound (kvStore.put), the
// client's answer is then answered 503 and a cancel is dropped.
func (x *crossing) carry(ctx context.Context, sid, version string, body []byte) error {
	if len(body) > maxCrossing {
		return fmt.Errorf("facade: a message of %d bytes is not carried (at most %d)", len(body), maxCrossing)
	}
	raw, err := json.Marshal(crossRecord{MCPSession: sid, Version: version, Message: body})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The put publishes raw to the key's subscribers; the record is a
	// message, not state, and is deleted again (up to maxCrossing bytes
	// that no other bound counts, so it is judged as a new key).
	key := x.crossKey("x", sid) + "." + nuid.Next()
	if err := x.store.put(ctx, key, json.RawMessage(raw), true); err != nil {
		x.log.Warn("facade: a message of an MCP session could not be carried to another process", "session", x.session, "err", err)
		return err
	}
	x.store.delete(ctx, key)
	return nil
}

// follow subscribes to sid's crossings (once per MCP session, counted)
// until stop.
func (x *crossing) follow(ctx context.Context, sid string) (stop func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	cs := x.subs[sid]
	if cs == nil {
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx)) // until the last stop
		subject, err := x.store.subject(ctx, x.crossKey("x", sid)+".*")
		if err == nil {
			err = bus.Listen(lctx, x.nc, subject, 64, func(m *nats.Msg) bool { x.deliver(sid, m); return true }, func() {})
		}
		if err != nil {
			cancel()
			x.log.Warn("facade: an MCP session's messages reaching other processes will not be followed", "session", x.session, "err", err)
			return func() {}
		}
		if x.subs == nil {
			x.subs = map[string]*crossSub{}
		}
		cs = &crossSub{stop: cancel}
		x.subs[sid] = cs
	}
	cs.n++
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if cs.n--; cs.n == 0 {
			cs.stop()
			delete(x.subs, sid)
		}
	}
}

// deliver hands a carried message of MCP session sid to this process's
// mcp-go.
func (x *crossing) deliver(sid string, m *nats.Msg) {
	if kvDeleted(m) {
		return
	}
	var rec crossRecord
	if err := json.Unmarshal(m.Data, &rec); err != nil || rec.MCPSession != sid || len(rec.Message) == 0 {
		return
	}
	msg := rec.Message
	var p rpcMessage
	if json.Unmarshal(msg, &p) != nil {
		return
	}
	if tag, n, tagged := untagID(p.ID); tagged && p.response() {
		var ok bool
		if msg, ok = withID(msg, n); tag != x.tag || !ok {
			return // another process's question
		}
	}
	if code := x.inject(sid, rec.Version, msg, false); code >= 400 {
		x.log.Debug("facade: a carried message was not taken", "session", x.session, "status", code)
	}
}

// untagID splits a tagged id ("<tag>.<n>", n a positive decimal number)
// into its tag and n; false for any other id.
func untagID(id json.RawMessage) (tag string, n json.RawMessage, ok bool) {
	var s string
	if len(id) == 0 || id[0] != '"' || json.Unmarshal(id, &s) != nil {
		return "", nil, false
	}
	tag, num, ok := strings.Cut(s, ".")
	if v, err := strconv.ParseInt(num, 10, 64); !ok || tag == "" || err != nil || v <= 0 || strconv.FormatInt(v, 10) != num {
		return "", nil, false
	}
	return tag, json.RawMessage(num), true
}

// withID returns the JSON-RPC message msg with id as its id.
func withID(msg []byte, id json.RawMessage) ([]byte, bool) {
	return withMember(msg, "id", func(json.RawMessage) (json.RawMessage, bool) { return id, true })
}

// tagEvent returns the server-sent event ev with the id of the request it
// carries tagged; any other event (a notification, a response, one too
// large for a request the facade sends) as it is.
func tagEvent(ev []byte, tag string) []byte {
	start := 0
	for !bytes.HasPrefix(ev[start:], []byte("data: ")) {
		i := bytes.IndexByte(ev[start:], '\n')
		if i < 0 {
			return ev
		}
		start += i + 1
	}
	start += len("data: ")
	end := start + bytes.IndexByte(ev[start:], '\n')
	if end < start || end-start > maxCrossing || !bytes.Contains(ev[start:end], []byte(`"method"`)) {
		return ev
	}
	var m rpcMessage
	var n int64
	if json.Unmarshal(ev[start:end], &m) != nil || m.Method == "" || json.Unmarshal(m.ID, &n) != nil || n <= 0 {
		return ev
	}
	id, _ := json.Marshal(tag + "." + strconv.FormatInt(n, 10))
	data, ok := withID(ev[start:end], id)
	if !ok {
		return ev
	}
	return slices.Concat(ev[:start], data, ev[end:])
}

// tagWriter tags the requests written on an event stream of mcp-go's
// (tagEvent); everything else passes as it is.
type tagWriter struct {
	http.ResponseWriter
	tag     string
	pending []byte // an event begun and not yet ended
}

func (w *tagWriter) Write(p []byte) (int, error) {
	if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		return w.ResponseWriter.Write(p)
	}
	data := p
	if len(w.pending) > 0 {
		data = append(w.pending, p...)
	}
	for {
		i := bytes.Index(data, []byte("\n\n"))
		if i < 0 {
			break
		}
		if _, err := w.ResponseWriter.Write(tagEvent(data[:i+2], w.tag)); err != nil {
			return 0, err
		}
		data = data[i+2:]
	}
	w.pending = append([]byte(nil), data...)
	return len(p), nil
}

func (w *tagWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *tagWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// maxBody bounds one HTTP request's body: a call's input is at most
// 1 MiB (docs/protocol.md 13).
const maxBody = 4 << 20

// readPost bounds, buffers (for the next handler) and decodes a POST's
// body, once for every handler: m is nil for another method or a body that
// is not one JSON-RPC object (a batch, garbage). It gives a 2026-07-28
// notification that carries the Mcp-Protocol-Version header but no _meta
// protocol version the version of its header: the Go SDK treats the 400
// mcp-go answers as a dead connection (issue 18). False: the body could
// not be read (answered).
func readPost(w http.ResponseWriter, r *http.Request) (body []byte, m *rpcMessage, ok bool) {
	if r.Method != http.MethodPost || r.Body == nil {
		return nil, nil, true
	}
	version := r.Header.Get(mcp.HeaderProtocolVersion)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeHTTPError(w, http.StatusRequestEntityTooLarge, "facade: the request body is too large or unreadable")
		return nil, nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	m = parseMessage(body)
	if !mcp.IsModernProtocol(version) || m == nil || m.ID != nil || !strings.HasPrefix(m.Method, "notifications/") {
		return body, m, true // mcp-go answers a request or a batch as it is
	}
	v, _ := json.Marshal(version)
	stamped, ok := withMember(body, "params", func(params json.RawMessage) (json.RawMessage, bool) {
		return withMember(params, "_meta", func(meta json.RawMessage) (json.RawMessage, bool) {
			return withMember(meta, mcp.MetaKeyProtocolVersion, func(had json.RawMessage) (json.RawMessage, bool) { return v, had == nil })
		})
	})
	if ok {
		r.Body = io.NopCloser(bytes.NewReader(stamped))
		r.ContentLength = int64(len(stamped))
		body = stamped
	}
	return body, m, true
}

// withMember returns the JSON object obj (absent or null: {}) with its
// member key set to what set makes of it (nil: absent); false when obj is
// not an object or set declines.
func withMember(obj json.RawMessage, key string, set func(json.RawMessage) (json.RawMessage, bool)) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if obj != nil && json.Unmarshal(obj, &m) != nil {
		return nil, false
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	v, ok := set(m[key])
	if !ok {
		return nil, false
	}
	m[key] = v
	out, err := json.Marshal(m)
	return out, err == nil
}

// modernCancel reports whether m, posted on r, is a 2026-07-28
// notifications/cancelled over HTTP, which the facade answers 202 and drops:
// the request id it names is ambiguous without MCP sessions; such a host
// cancels by ending the request's stream (docs/mcp.md).
func modernCancel(r *http.Request, m *rpcMessage) bool {
	return m != nil && m.ID == nil && m.Method == string(mcp.MethodNotificationCancelled) &&
		mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion))
}
