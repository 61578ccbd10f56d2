package facade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/worker"
)

// TestMain lets the test binary be the stdio MCP server a bridge starts
// (FACADE_TEST_STDIO_SERVER=1): tools echo, one and two, its pid written
// to FACADE_TEST_PID_FILE.
func TestMain(m *testing.M) {
	if os.Getenv("FACADE_TEST_STDIO_SERVER") == "1" {
		_ = os.WriteFile(os.Getenv("FACADE_TEST_PID_FILE"), []byte(strconv.Itoa(os.Getpid())), 0o600)
		s := server.NewMCPServer("stdio", "1")
		for _, name := range []string{"echo", "one", "two"} {
			s.AddTool(mcp.NewTool(name, mcp.WithString("text"), mcp.WithReadOnlyHintAnnotation(true)),
				func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return mcp.NewToolResultText(r.GetString("text", "")), nil
				})
		}
		if err := server.ServeStdio(s); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// countChanged counts the tools/list_changed c gets from now on.
func countChanged(c *mcpConn) func() int {
	for len(c.changed) > 0 {
		<-c.changed
	}
	var mu sync.Mutex
	n := 0
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-c.changed:
				mu.Lock()
				n++
				mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	return func() int {
		// What is sent within MaxCalm + the last settle re-listing after
		// the change counts too.
		<-time.After(MaxCalm + settle[len(settle)-1])
		close(stop)
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestCalmBurst: four workers registering at once reach a connected host
// as at most two tools/list_changed, the last with every tool.
func TestCalmBurst(t *testing.T) {
	e := newEnv(t)
	c := e.connect(t, "s1", mcp.ProtocolVersion20251125, "alice")
	count := countChanged(c)
	var wg sync.WaitGroup
	tools := []string{"w1", "w2", "w3", "w4"}
	var mu sync.Mutex
	var first, final time.Time
	for _, name := range tools {
		wg.Go(func() {
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				if now := time.Now(); first.IsZero() || now.Before(first) {
					first = now
				}
				final = time.Now()
			}()
			_, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
				return worker.Register(w, bus.ToolDef{Name: name, Description: "Burst.", ReadOnly: true},
					func(context.Context, *worker.Call, struct{}) (string, error) { return name, nil })
			}})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		got := busNames(t, e, "s1", "alice")
		for _, w := range tools {
			if !slices.Contains(got, w) {
				return fmt.Errorf("%s not listed yet", w)
			}
		}
		return nil
	})
	n := count()
	allowed := 2
	if final.Sub(first) > Calm { // a loaded machine spread the burst out
		allowed = len(tools) + 1
	}
	if n < 1 || n > allowed {
		t.Fatalf("%d tools/list_changed for one burst of four registrations (at most %d)", n, allowed)
	}
	got := names(t, c)
	for _, w := range tools {
		if !slices.Contains(got, w) {
			t.Fatalf("the host's list lacks %s: %v", w, got)
		}
	}
	t.Logf("four registrations: %d notifications", n)
}

// TestCalmBridgeRestart: a bridged mcp-go stdio server killed and
// restarted by the bridge within its grace: a connected host gets at most
// two tools/list_changed (none, as the bridge keeps its tools), and no
// list it reads meanwhile lacks the server's tools.
func TestCalmBridgeRestart(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	b, err := bridge.New(e.conn(t, xtest.RoleWorker), &bridge.File{Servers: []bridge.Server{{Name: "t", Command: os.Args[0],
		Args: []string{"-test.run=^$"}, Cwd: dir, Env: map[string]string{"FACADE_TEST_STDIO_SERVER": "1", "FACADE_TEST_PID_FILE": pidFile}}}},
		bridge.Config{Heartbeat: 2 * time.Second, Ping: 100 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	want := []string{"mcp__t__echo", "mcp__t__one", "mcp__t__two"}
	if err := e.d.WaitLive(t.Context(), want...); err != nil {
		t.Fatal(err)
	}
	c := e.connect(t, "s1", mcp.ProtocolVersion20251125, "alice")
	lister := e.connect(t, "s1", mcp.ProtocolVersion20251125, "alice")
	pid := readPID(t, pidFile)
	count := countChanged(c)

	// Read the list all through the restart.
	stop := make(chan struct{})
	var (
		mu      sync.Mutex
		partial []string
		lists   int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(t.Context(), bound)
			res, err := lister.ListTools(ctx, mcp.ListToolsRequest{})
			cancel()
			if err != nil {
				continue
			}
			var got []string
			for _, tool := range res.Tools {
				got = append(got, tool.Name)
			}
			mu.Lock()
			lists++
			for _, w := range want {
				if !slices.Contains(got, w) {
					partial = append(partial, fmt.Sprintf("%s missing from %v", w, got))
				}
			}
			mu.Unlock()
		}
	}()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if readPID(t, pidFile) == pid {
			return fmt.Errorf("not restarted yet")
		}
		return nil
	})
	if r, err := call(t, c, "mcp__t__echo", map[string]any{"text": "back"}, false); err != nil || textOf(r) != "back" {
		t.Fatalf("after the restart: %+v %v", r, err)
	}
	n := count()
	close(stop)
	<-done
	if len(partial) > 0 {
		t.Fatalf("a partial list during the restart (%d lists): %s", lists, partial[0])
	}
	if n > 2 {
		t.Fatalf("%d tools/list_changed for one restart", n)
	}
	t.Logf("restart: %d notifications, %d lists read, none partial", n, lists)
}

func readPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(string(b))
		return err
	})
	return pid
}

// TestCalmToggles: nine list changes in a row (reset_tools switching a
// group on and off through the bus) reach a connected host as at most
// two tools/list_changed, and its list is the last state. Without the
// coalescing each change is one notification.
func TestCalmToggles(t *testing.T) {
	e := newEnv(t)
	c := e.connect(t, "s1", mcp.ProtocolVersion20251125, "alice")
	count := countChanged(c)
	// Changes further apart than Calm are rightly told apart: on a
	// loaded machine a reset_tools may take that long, and each such gap
	// allows one more notification.
	allowed, last := 2, time.Now()
	for i := range 9 {
		e.resetTools(t, "s1", map[string]bool{"ops": i%2 == 0})
		now := time.Now()
		if i > 0 && now.Sub(last) > Calm {
			allowed++
		}
		last = now
	}
	n := count()
	if n < 1 || n > allowed {
		t.Fatalf("%d tools/list_changed for nine changes (at most %d)", n, allowed)
	}
	if got := names(t, c); !slices.Contains(got, "deploy") {
		t.Fatalf("the host's list is not the last state: %v", got)
	}
	t.Logf("nine changes: %d notifications", n)
}

// TestCalmTrailingEdge: the coalescing on a fake clock (testing/synctest):
// a burst is applied Calm after its last change, a burst that never
// settles MaxCalm after its first, never two within Calm, a host's own
// listing applies at once, and a return to the applied list sends nothing.
func TestCalmTrailingEdge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := &session{ctx: ctx, mcp: server.NewMCPServer("t", "1", server.WithToolCapabilities(true))}
		change := func(raw string, lazy bool) {
			s.mu.Lock()
			s.raw = raw
			s.applyLocked(lazy, []server.ServerTool{{Tool: mcp.NewTool(raw), Handler: nil}}, map[string]int{raw: 0})
			s.mu.Unlock()
		}
		sent := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.calm.sent }
		change("a", false) // the first listing: at once
		if sent() != 1 {
			t.Fatalf("first listing: %d", sent())
		}
		// A burst of three changes 100 ms apart: one notification, Calm
		// after the last.
		for _, raw := range []string{"b", "c", "d"} {
			time.Sleep(100 * time.Millisecond)
			change(raw, true)
		}
		time.Sleep(Calm - time.Millisecond)
		synctest.Wait()
		if sent() != 1 {
			t.Fatalf("sent before the burst settled: %d", sent())
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if sent() != 2 || s.order["d"] != 0 || len(s.order) != 1 {
			t.Fatalf("after the burst: %d %v", sent(), s.order)
		}
		// A change every 100 ms for 2 s: applied MaxCalm after the first.
		start := time.Now()
		for i := range 20 {
			change(string(rune('e'+i)), true)
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if sent() == 3 {
				if d := time.Since(start); d < MaxCalm || d > MaxCalm+100*time.Millisecond {
					t.Fatalf("an unsettled burst applied after %v", d)
				}
				break
			}
		}
		if sent() != 3 {
			t.Fatalf("an unsettled burst never applied: %d", sent())
		}
		// Back to the applied list: nothing is sent.
		s.mu.Lock()
		applied := s.calm.applied
		s.mu.Unlock()
		change("zz", true)
		change(applied, true)
		time.Sleep(MaxCalm)
		synctest.Wait()
		if sent() != 3 {
			t.Fatalf("a return to the applied list sent a notification: %d", sent())
		}
		// A host lists: a pending change is applied at once.
		change("host", true)
		s.flush()
		if sent() != 4 || s.order["host"] != 0 {
			t.Fatalf("flush: %d %v", sent(), s.order)
		}
	})
}
