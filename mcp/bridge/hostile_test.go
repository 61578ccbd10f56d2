package bridge

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// hostileServer is an MCP server that tries to blow up the bridge (issue
// 26, item 8): a progress flood, a 3 MiB description and title, a result
// of 100 MiB. It runs as its own process (TestMain), so the test process's
// memory is the bridge's.
func hostileServer() *server.MCPServer {
	s := server.NewMCPServer("hostile", "1.0.0", server.WithToolCapabilities(true))
	s.AddTool(mcp.NewTool("flood", mcp.WithDescription("Sends n progress notices, then answers."), mcp.WithNumber("n")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := int(req.GetFloat("n", 0))
			if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
				return mcp.NewToolResultError("no progress token"), nil
			}
			srv := server.ServerFromContext(ctx)
			for i := 1; i <= n; i++ {
				for srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress),
					map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": i, "total": n, "message": "flood"}) != nil {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					runtime.Gosched() // the notification queue is full: wait, never drop
				}
			}
			return mcp.NewToolResultText("sent " + strconv.Itoa(n)), nil
		})
	huge := strings.Repeat("d", 3<<20)
	s.AddTool(mcp.NewTool("described", mcp.WithDescription(huge), mcp.WithTitleAnnotation(huge)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
	s.AddTool(mcp.NewTool("huge", mcp.WithDescription("Answers 100 MiB of text.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strings.Repeat("r", 100<<20)), nil
		})
	return s
}

// procStatus returns a /proc/self/status value in bytes (VmRSS, VmHWM).
func procStatus(t *testing.T, key string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skipf("no %s in /proc/self/status", key)
	return 0
}

// callWithin runs one call with its own deadline.
func (e *env) callWithin(d time.Duration, id, name string, input any) bus.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), d)
	defer cancel()
	reply, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: id, Name: name, Input: client.Input(input)}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return reply.Results[0]
}

// TestHostileServerBounded: a hostile bridged server's progress flood
// (200,000 notices) becomes a few progress events per second, its 3 MiB
// description and title are cut to their limits, and its 100 MiB result is
// refused while it streams: the bridge's peak RSS grows by far less than
// the result, and the server stays connected (issue 26, item 8).
func TestHostileServerBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 100 MiB")
	}
	e := newEnv(t)
	srv, _, _ := stdioServer(t, "h")
	srv.Env["BRIDGE_TEST_STDIO_SERVER"] = "hostile"
	srv.Timeout = "120s"
	// Pings wait behind the 100 MiB on the server's stdout: give them time
	// (under -race the server takes a while to write it).
	e.bridge(&File{Servers: []Server{srv}}, func(c *Config) { c.PingTimeout = 2 * time.Minute })
	// A 3 MiB listing takes a while under -race on a loaded machine.
	var defs map[string]bus.ToolDef
	testkit.CheckFor(t, 2*time.Minute, 50*time.Millisecond, func() error {
		d, names, err := e.defs()
		if err == nil && len(names) < 3 {
			err = fmt.Errorf("listed %v", names)
		}
		defs = d
		return err
	})

	// Descriptions and titles are cut, saying so.
	d := defs["mcp__h__described"]
	if len(d.Description) > MaxDescription || !strings.HasSuffix(d.Description, fmt.Sprintf("[…cut: %d bytes]", 3<<20)) {
		t.Errorf("description of %d bytes, ends %q", len(d.Description), d.Description[max(0, len(d.Description)-40):])
	}
	if len(d.Title) > MaxTitle || d.MCP == nil || d.MCP.Annotations == nil || len(d.MCP.Annotations.Title) > MaxTitle {
		t.Errorf("title of %d bytes", len(d.Title))
	}

	// The flood: every notice reaches the bridge; a few are stored.
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	start := time.Now()
	res := e.callWithin(2*time.Minute, "f1", "mcp__h__flood", map[string]any{"n": floodNotices})
	took := time.Since(start)
	if res.State != bus.StateSuccess || text(res) != fmt.Sprintf("sent %d", floodNotices) {
		t.Fatalf("flood: %s %q", res.State, text(res))
	}
	progress := 0
	for done := false; !done; {
		select {
		case m := <-ev.C:
			switch {
			case m.Type == bus.TypeCallProgress && m.ToolCallID == "f1":
				progress++
			case m.Type == bus.TypeBatchDone:
				done = true
			}
		case <-time.After(bound):
			t.Fatalf("no result event after %d progress events", progress)
		}
	}
	if most := int(took/progressEvery) + 2; progress < 1 || progress > most {
		t.Errorf("%d progress events in %v for %d notices; want 1 to %d", progress, took, floodNotices, most)
	}
	t.Logf("flood: %d notices in %v became %d progress events", floodNotices, took, progress)

	// The huge result: refused at the limit, never held whole.
	runtime.GC()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	base := procStatus(t, "VmRSS")
	res = e.callWithin(2*time.Minute, "h1", "mcp__h__huge", map[string]any{})
	peak := procStatus(t, "VmHWM")
	t.Logf("huge: peak RSS %d MiB over %d MiB before the call", (peak-base)>>20, base>>20)
	if res.State != bus.StateError || !strings.Contains(text(res), "exceeds the bridge's limit of 16777216 bytes") {
		t.Fatalf("huge: %s %.200q", res.State, text(res))
	}
	// Held whole, the 100 MiB would show at least its size again in the
	// decoder (and three times more under -race's shadow memory); a
	// bounded read peaks far lower, but on a starved machine the collector
	// runs late and the peak took 106 MiB once (TestHostileServerBounded
	// under seven helpers' load), so the bound leaves that room.
	if grew := peak - base; grew > 128<<20 {
		t.Errorf("the bridge's RSS grew by %d MiB for a refused 100 MiB result; want under 128 MiB", grew>>20)
	}
	// The server is still connected.
	if res := e.callWithin(bound, "f2", "mcp__h__flood", map[string]any{"n": 1}); res.State != bus.StateSuccess {
		t.Fatalf("after the huge result: %s %q", res.State, text(res))
	}
}
