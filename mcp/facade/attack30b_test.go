package facade

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
)

// TestAttackProgressBreaksFraming (session 30, second red team): progress
// text that ends lines the ways an event stream does (\n, \r, \r\n), or
// that JavaScript does (U+2028, U+2029), NEL, NUL, invalid UTF-8, or is
// large, is one event of one JSON line on the call's stream, and decodes
// back to its text.
func TestAttackProgressBreaksFraming(t *testing.T) {
	ctx := server.NewMCPServer("t", "1").WithContext(t.Context(), &streamSession{})
	texts := []string{"a\nb", "a\rdata: {}\r\r", "a\r\nevent: x\r\n\r\n", "\u2028\u2029\u0085", "\x00\x1b[2K", "\xff\xfe", strings.Repeat("\r\n", 1<<19)}
	rec := httptest.NewRecorder()
	st := newCallStream(rec)
	for i, text := range texts {
		if !st.notify(ctx, "notifications/progress", map[string]any{"progressToken": "p", "progress": i, "message": text}) {
			t.Fatal("refused")
		}
	}
	got := sseEvents(t, rec.Body.String())
	if len(got) != len(texts) {
		t.Fatalf("%d events for %d notices", len(got), len(texts))
	}
	for i, data := range got {
		var n struct{ Params struct{ Message string } }
		if err := json.Unmarshal([]byte(data), &n); err != nil || strings.ContainsAny(data, "\r\u2028\u2029") ||
			n.Params.Message != string([]rune(texts[i])) {
			t.Errorf("notice %d: %v %.80q", i, err, data)
		}
	}
}

// TestAttackProgressSlowReader (session 30, second red team): a host that
// sends a tools/call with a progress token and reads nothing of its
// response. The call writes its progress on that response itself, from
// its own loop (stream.go), so once the connection's buffers were full the
// write blocked, with the stream's lock, for as long as the host kept the
// connection open: the call's loop never reached its deadline or result,
// its bus call was never interrupted and the MCP session never released.
// A notice's write is bounded (callStream.wait): past it the stream ends,
// and mcp-go's own write after it fails at once.
func TestAttackProgressSlowReader(t *testing.T) {
	type report struct {
		n        int
		took     time.Duration
		writeErr error
	}
	reports := make(chan report, 1)
	big := strings.Repeat("x", 64<<10)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := server.NewMCPServer("t", "1").WithContext(r.Context(), &streamSession{})
		st := newCallStream(w)
		st.wait = 200 * time.Millisecond
		start, n := time.Now(), 0
		for n < 4096 && st.notify(ctx, "notifications/progress", map[string]any{"progressToken": "p", "progress": n, "message": big}) {
			n++
		}
		took := time.Since(start)
		_, err := io.WriteString(st, "event: message\ndata: {}\n\n") // mcp-go's result
		if err == nil {
			err = http.NewResponseController(st).Flush()
		}
		st.end()
		reports <- report{n, took, err}
	}))
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		_ = c.(*net.TCPConn).SetWriteBuffer(4096)
		return ctx
	}
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-reports:
		if r.n == 4096 || r.writeErr == nil {
			t.Fatalf("%d notices of 64 KiB written to a host that reads nothing, the result's write: %v", r.n, r.writeErr)
		}
		t.Logf("%d notices written, the next refused after %v; the result's write: %v", r.n, r.took, r.writeErr)
	case <-time.After(10 * time.Second):
		c.Close() // lets the handler go
		t.Fatal("a notice's write still blocked after 10 s (the host reads nothing)")
	}
}
