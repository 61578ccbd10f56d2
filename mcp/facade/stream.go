package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// callStream is the response of a tools/call POST, which the call writes
// its progress on itself (docs/mcp.md "Progress of calls at once"): mcp-go
// (v1.2.1) forwards notifications from one channel per MCP session, so a
// notice sent through it went out on whichever of the session's requests
// took it, and was dropped when that request was ending. mcp-go writes
// through it as through any writer; every write is under one lock, and
// mcp-go's header is a map of its own (it sets it from two goroutines)
// until it sends it.
type callStream struct {
	http.ResponseWriter
	mu     sync.Mutex
	header http.Header // mcp-go's
	sent   bool        // the status and header are sent
	ended  bool        // mcp-go has returned, or a notice's write failed: nothing more from the call
	wait   time.Duration
}

// noticeWait bounds a notice's write: a host that reads nothing held the
// call's loop in it, and so its deadline and the bus call's interruption.
const noticeWait = 10 * time.Second

func newCallStream(w http.ResponseWriter) *callStream {
	return &callStream{ResponseWriter: w, header: w.Header().Clone(), wait: noticeWait}
}

func (s *callStream) Header() http.Header { return s.header }

func (s *callStream) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.send(code)
}

// send sends mcp-go's header with code, once (s.mu held).
func (s *callStream) send(code int) {
	if s.sent {
		return
	}
	s.sent = true
	h := s.ResponseWriter.Header()
	clear(h)
	maps.Copy(h, s.header)
	s.ResponseWriter.WriteHeader(code)
}

func (s *callStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.send(http.StatusOK)
	return s.ResponseWriter.Write(p)
}

func (s *callStream) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.send(http.StatusOK) // the header first, as net/http's Flush does
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *callStream) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// end is called once mcp-go has returned (its result is written or the
// request is gone).
func (s *callStream) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
}

// notify writes the notification method with params as an event of the
// call's stream, making the response an event stream if mcp-go has not
// (and marking the MCP session's responses as streams, as mcp-go's own
// sending does, so that mcp-go writes the result as an event after it). It
// reports false when it cannot: the session is not an initialised
// streamable HTTP one, mcp-go has returned, or its response is not a
// stream. A write to a client gone is not retried elsewhere.
func (s *callStream) notify(ctx context.Context, method string, params map[string]any) bool {
	sess, ok := server.ClientSessionFromContext(ctx).(server.SessionWithStreamableHTTPConfig)
	data, err := json.Marshal(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "method": method, "params": params})
	if !ok || !sess.Initialized() || err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.ResponseWriter.Header()
	if s.ended || s.sent && !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		return false
	}
	sess.UpgradeToSSEWhenReceiveNotification()
	if !s.sent {
		s.sent = true
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		s.ResponseWriter.WriteHeader(http.StatusOK)
	}
	rc := http.NewResponseController(s.ResponseWriter)
	_ = rc.SetWriteDeadline(time.Now().Add(s.wait))
	_, err = fmt.Fprintf(s.ResponseWriter, "event: message\ndata: %s\n\n", data)
	if err == nil {
		err = rc.Flush()
	}
	_ = rc.SetWriteDeadline(time.Time{})
	s.ended = err != nil // the host is gone or reads nothing (TestAttackProgressSlowReader)
	return err == nil
}
