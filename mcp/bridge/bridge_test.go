package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/store"
)

// TestMain lets the test binary be the stdio MCP server the tests start.
func TestMain(m *testing.M) {
	if os.Getenv("BRIDGE_TEST_STDIO_SERVER") == "hostile" {
		if err := server.ServeStdio(hostileServer()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if mode := os.Getenv("BRIDGE_TEST_STDIO_SERVER"); mode == "1" || mode == "slow" {
		if f := os.Getenv("BRIDGE_TEST_PID_FILE"); f != "" {
			_ = os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o600)
		}
		serve := func() error { return server.ServeStdio(testServer(newRecorder())) }
		if mode == "slow" {
			serve = serveSlow
		}
		if err := serve(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	bound     = 15 * time.Second
	heartbeat = 500 * time.Millisecond
)

type env struct {
	t      *testing.T
	srv    *natsserver.Server
	client *client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testkit.RunServer(t)
	r, err := router.New(testkit.Connect(t, srv), router.Config{DefaultMode: "bypass", Store: store.Config{Heartbeat: heartbeat},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	return &env{t: t, srv: srv, client: client.New(testkit.Connect(t, srv), client.Config{Source: "test/agent"})}
}

// bridge starts a bridge for f, stopped when the test ends.
func (e *env) bridge(f *File, tune ...func(*Config)) *Bridge {
	e.t.Helper()
	cfg := Config{Logger: testLogger(), Heartbeat: heartbeat, Ping: 100 * time.Millisecond,
		PingTimeout: 3 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, Grace: 200 * time.Millisecond}
	for _, f := range tune {
		f(&cfg)
	}
	b, err := New(testkit.Connect(e.t, e.srv), f, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := b.Start(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

// defs lists the tools session s sees, by name.
func (e *env) defs() (map[string]bus.ToolDef, []string, error) {
	ctx, cancel := context.WithTimeout(e.t.Context(), bound)
	defer cancel()
	list, err := e.client.Tools(ctx, "s1", "", nil)
	if err != nil {
		return nil, nil, err
	}
	m := map[string]bus.ToolDef{}
	var names []string
	for _, raw := range list.Tools {
		var d bus.ToolDef
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, nil, err
		}
		m[d.Name] = d
		names = append(names, d.Name)
	}
	return m, names, nil
}

// waitTools waits until every name in want is listed and none in gone.
func (e *env) waitTools(want, gone []string) map[string]bus.ToolDef {
	e.t.Helper()
	var defs map[string]bus.ToolDef
	testkit.CheckFor(e.t, bound, 20*time.Millisecond, func() error {
		d, names, err := e.defs()
		if err != nil {
			return err
		}
		for _, w := range want {
			if !slices.Contains(names, w) {
				return fmt.Errorf("%s not listed in %v", w, names)
			}
		}
		for _, g := range gone {
			if slices.Contains(names, g) {
				return fmt.Errorf("%s still listed", g)
			}
		}
		defs = d
		return nil
	})
	return defs
}

// call runs one call and returns its result.
func (e *env) call(name string, input any) bus.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), bound)
	defer cancel()
	reply, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: name, Input: client.Input(input)}}})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(reply.Results) != 1 {
		e.t.Fatalf("%s: want one result, got %+v", name, reply)
	}
	return reply.Results[0]
}

func text(r bus.Result) string {
	var parts []string
	for _, b := range r.Output {
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "|")
}

func stdioServer(t *testing.T, name string) (Server, string, string) {
	dir := t.TempDir()
	pid, cancelled := filepath.Join(dir, "pid"), filepath.Join(dir, "cancelled")
	return Server{Name: name, Command: os.Args[0], Args: []string{"-test.run=^$"}, Cwd: dir,
		Env: map[string]string{"BRIDGE_TEST_STDIO_SERVER": "1", "BRIDGE_TEST_PID_FILE": pid, "BRIDGE_TEST_CANCEL_FILE": cancelled}}, pid, cancelled
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

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}
