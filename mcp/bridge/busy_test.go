package bridge

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
)

// slowBytes is the size of the slow server's one result.
const slowBytes = 1 << 20

// serveSlow runs a stdio MCP server whose output drips out (dripWriter), as
// a single-threaded server's does while it writes a large result: a ping
// sent meanwhile is answered only once the result is out.
func serveSlow() error {
	s := server.NewMCPServer("slow", "1.0.0", server.WithToolCapabilities(true))
	s.AddTool(mcp.NewTool("big", mcp.WithDescription("Answers 1 MiB of text, slowly."), mcp.WithReadOnlyHintAnnotation(true)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strings.Repeat("b", slowBytes)), nil
		})
	return server.NewStdioServer(s).Listen(context.Background(), os.Stdin, dripWriter{os.Stdout})
}

// dripWriter writes 32 KiB at a time, 200 ms apart: a 1 MiB result takes
// about 6.4 s, three ping timeouts of TestPingBehindLargeResult.
type dripWriter struct{ w io.Writer }

func (d dripWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k, err := d.w.Write(p[:min(len(p), 32<<10)])
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
		if len(p) > 0 {
			time.Sleep(200 * time.Millisecond) // the server's pace, not a test's wait
		}
	}
	return n, nil
}

// TestPingBehindLargeResult: a stdio server still writing a large result
// misses pings (each waits behind the result on its stdout) but is not
// taken for dead: the call gets the whole result and the server process is
// the one started first. Before, a ping that timed out behind a 3 MiB
// result under load closed the link mid-call ("transport closed",
// TestInspectorBridgedLarge in a loaded CI run).
func TestPingBehindLargeResult(t *testing.T) {
	e := newEnv(t)
	srv, pidFile, _ := stdioServer(t, "slow")
	srv.Env["BRIDGE_TEST_STDIO_SERVER"] = "slow"
	e.bridge(&File{Servers: []Server{srv}}, func(c *Config) { c.Ping, c.PingTimeout = 20*time.Millisecond, 2*time.Second })
	e.waitTools([]string{"mcp__slow__big"}, nil)
	pid := readPID(t, pidFile)
	res := e.callWithin(time.Minute, "b1", "mcp__slow__big", map[string]any{})
	// What this test is about is the link: a call that fails for another
	// reason (a router that lost the worker's beats on a starved machine:
	// UnknownOutcomeError) says nothing of pings, one that succeeded must
	// have the whole result.
	if out := text(res); strings.Contains(out, "transport closed") || strings.Contains(out, "not connected") {
		t.Fatalf("the link was closed behind the result: %s %.200q", res.State, out)
	}
	if res.State == bus.StateSuccess && storedSize(res) != slowBytes {
		t.Fatalf("%d bytes stored of %d", storedSize(res), slowBytes)
	}
	if now := readPID(t, pidFile); now != pid {
		t.Fatalf("the server was restarted (pid %d, then %d): a ping behind its output took it for dead", pid, now)
	}
}

// storedSize is the size of the result's stored output (docs/protocol.md
// 5.9: a result this large is a preview and a link).
func storedSize(r bus.Result) int64 {
	for _, b := range r.Output {
		if b.URL != "" {
			return b.Size
		}
	}
	return 0
}

// TestBusy: which failed pings only waited behind output.
func TestBusy(t *testing.T) {
	last := time.Now()
	heard := &stdioTransport{lim: newLineLimiter(strings.NewReader(""), 1, nil)}
	heard.lim.heard.Store(last.Add(time.Millisecond).UnixNano())
	silent := &stdioTransport{lim: newLineLimiter(strings.NewReader(""), 1, nil)}
	silent.lim.heard.Store(last.Add(-time.Millisecond).UnixNano())
	timeout := transport.NewError(context.DeadlineExceeded)
	for _, c := range []struct {
		name string
		tr   transport.Interface
		err  error
		want bool
	}{
		{"timed out, wrote since the last ping", heard, timeout, true},
		{"timed out, silent since the last ping", silent, timeout, false},
		{"closed, wrote since the last ping", heard, transport.NewError(transport.ErrTransportClosed), false},
		{"an error answer", heard, errors.New("method not found"), false},
		{"not stdio", &httpTransport{}, timeout, false},
	} {
		if got := busy(c.tr, c.err, last); got != c.want {
			t.Errorf("%s: busy %v, want %v", c.name, got, c.want)
		}
	}
}
