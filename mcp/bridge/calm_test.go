package bridge

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestCalmRestart: a stdio server killed and restarted within the grace
// period keeps its tools registered throughout (the listing never lacks
// them, no worker is replaced), and a call made while it is down waits for
// it and succeeds.
func TestCalmRestart(t *testing.T) {
	e := newEnv(t)
	s, pidFile, _ := stdioServer(t, "t")
	s.EnableTools = []string{"echo", "slow"}
	b := e.bridge(&File{Servers: []Server{s}}, func(c *Config) { c.Grace = time.Minute })
	want := []string{"mcp__t__echo", "mcp__t__slow"}
	e.waitTools(want, nil)
	l := b.links[0]
	l.mu.Lock()
	gen := l.gen
	l.mu.Unlock()

	// Watch the listing all through the restart.
	stop := make(chan struct{})
	var (
		mu      sync.Mutex
		missing []string
		lists   int
	)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, names, err := e.defs()
			mu.Lock()
			lists++
			for _, w := range want {
				if err == nil && !slices.Contains(names, w) {
					missing = append(missing, fmt.Sprintf("%s missing from %v", w, names))
				}
			}
			mu.Unlock()
		}
	}()

	pid := readPID(t, pidFile)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Called while the server is down or coming back: waits, then runs.
	if r := e.call("mcp__t__echo", map[string]any{"text": "through"}); text(r) != "through" {
		t.Fatalf("call across the restart: %+v", r)
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if readPID(t, pidFile) == pid {
			return errNotYet
		}
		return nil
	})
	// A few more listings after the restart.
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if lists < 5 {
			return errNotYet
		}
		return nil
	})
	close(stop)
	<-watched
	if len(missing) > 0 {
		t.Fatalf("the tools left the listing during the restart (%d listings): %v", lists, missing[0])
	}
	t.Logf("%d listings during the restart, none without the tools", lists)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen != gen || l.w == nil {
		t.Fatalf("the worker was replaced (generation %d → %d)", gen, l.gen)
	}
}

// TestGraceExpires: a server that stays down past the grace period has its
// tools withdrawn, and a call waiting for it ends with an error instead of
// hanging.
func TestGraceExpires(t *testing.T) {
	e := newEnv(t)
	h := startHTTP(t, false, newRecorder())
	e.bridge(&File{Servers: []Server{{Name: "t", URL: h.url(), EnableTools: []string{"echo"}}}}, func(c *Config) {
		c.Grace = 1500 * time.Millisecond
	})
	e.waitTools([]string{"mcp__t__echo"}, nil)
	h.kill()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	_ = ctx
	r := e.call("mcp__t__echo", map[string]any{"text": "x"})
	if r.State == "success" {
		t.Fatalf("a call on a server that stayed down: %+v", r)
	}
	e.waitTools(nil, []string{"mcp__t__echo"})
	h.start()
	e.waitTools([]string{"mcp__t__echo"}, nil)
}

// TestCalmRestartHTTP: an HTTP (or SSE) server killed and started again on
// its address within the grace period: the bridge reconnects if it must,
// finds the same tools and changes nothing on the bus.
func TestCalmRestartHTTP(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(map[bool]string{false: "streamable", true: "sse"}[sse], func(t *testing.T) {
			e := newEnv(t)
			h := startHTTP(t, sse, newRecorder())
			tr := TransportHTTP
			if sse {
				tr = TransportSSE
			}
			b := e.bridge(&File{Servers: []Server{{Name: "t", Transport: tr, URL: h.url(), EnableTools: []string{"echo"}}}},
				func(c *Config) { c.Grace = time.Minute })
			e.waitTools([]string{"mcp__t__echo"}, nil)
			l := b.links[0]
			l.mu.Lock()
			gen := l.gen
			l.mu.Unlock()
			h.kill()
			h.start()
			// (mcp-go's streamable HTTP server takes the old MCP session
			// id, so the bridge may not even need to reconnect; over SSE
			// it does.)
			if r := e.call("mcp__t__echo", map[string]any{"text": "back"}); text(r) != "back" {
				t.Fatalf("after the restart: %+v", r)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.gen != gen || l.w == nil {
				t.Fatalf("the worker was replaced (generation %d → %d)", gen, l.gen)
			}
		})
	}
}

// TestServerEnv: a stdio server does not inherit the worker's NATS_*
// settings (credentials, tokens), unless its own env sets them.
func TestServerEnv(t *testing.T) {
	t.Setenv("NATS_TOKEN", "secret")
	t.Setenv("NATS_CREDS", "/srv/worker.creds")
	e := newEnv(t)
	s, _, _ := stdioServer(t, "t")
	s.EnableTools = []string{"getenv"}
	s.Env["NATS_URL"] = "nats://given"
	e.bridge(&File{Servers: []Server{s}})
	e.waitTools([]string{"mcp__t__getenv"}, nil)
	for name, want := range map[string]string{"NATS_TOKEN": "false ", "NATS_CREDS": "false ", "NATS_URL": "true nats://given", "BRIDGE_TEST_STDIO_SERVER": "true 1"} {
		if r := e.call("mcp__t__getenv", map[string]any{"name": name}); text(r) != want {
			t.Errorf("%s: %q, want %q", name, text(r), want)
		}
	}
}
