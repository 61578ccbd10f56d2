package mcpinterop

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// brewWorker adds a worker with the background tools brew and brew_typed
// (an output schema): timeout 300 ms, the progress "brewing", then "brewed"
// when release yields (one call per value), or the call's cancellation
// (then stopped receives its id).
func brewWorker(t *testing.T, e *env, release <-chan struct{}, stopped chan<- string) {
	t.Helper()
	brew := func(ctx context.Context, c *worker.Call, _ struct{}) (string, error) {
		if err := c.Progress(bus.Text("brewing")...); err != nil {
			return "", err
		}
		select {
		case <-release:
			return "brewed", nil
		case <-ctx.Done():
			stopped <- c.ID
			return "", ctx.Err()
		}
	}
	_, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		if err := worker.Register(w, bus.ToolDef{Name: "brew", Description: "Brews in the background.", Background: true, TimeoutMS: 300}, brew); err != nil {
			return err
		}
		return worker.Register(w, bus.ToolDef{Name: "brew_typed", Description: "Brews; typed output.", Background: true, TimeoutMS: 300,
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}, brew)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.WaitLive(t.Context(), "brew", "brew_typed"); err != nil {
		t.Fatal(err)
	}
}

// TestTypeScriptSDKBackgroundTasks: background tasks (docs/protocol.md
// 5.10) as MCP tasks through the TypeScript SDK, over streamable HTTP and
// over stdio (js/tasks.mjs): a plain call past its timeout returns the
// handle as a normal result (isError with a note for a tool with an output
// schema, which the SDK accepts); task-augmented calls go on as bus tasks,
// tasks/get shows the output so far, tasks/list lists them, another
// session's host is refused them, tasks/cancel stops the tool's run, and
// two tasks waited for together both complete with the tool's output.
func TestTypeScriptSDKBackgroundTasks(t *testing.T) {
	for _, mode := range []string{"http", "stdio"} {
		t.Run(mode, func(t *testing.T) {
			path := script(t, "tasks.mjs")
			e := newEnv(t)
			release, stopped := make(chan struct{}), make(chan string, 4)
			brewWorker(t, e, release, stopped)
			s := "ts-bg-" + mode
			var p *nodeProc
			if mode == "http" {
				p = runNode(t, path, "http", e.url(s), e.url(s+"-other"), token)
			} else {
				p = runNode(t, path, "stdio", serveStdio(t, e, s), serveStdio(t, e, s+"-other"))
			}
			p.next(t, "connect")

			var st struct {
				Text    string `json:"text"`
				IsError bool   `json:"isError"`
				Handle  string `json:"handle"`
				Error   string `json:"error"`
			}
			decode := func(step string) {
				t.Helper()
				st.Text, st.IsError, st.Handle, st.Error = "", false, "", ""
				if err := json.Unmarshal(p.nextRaw(t, step), &st); err != nil {
					t.Fatal(err)
				}
			}
			decode("plain")
			if st.IsError || st.Handle == "" || !strings.Contains(st.Text, "(id="+st.Handle+")") || !strings.Contains(st.Text, "task_output") {
				t.Fatalf("plain call past its timeout: %+v", st)
			}
			handles := []string{st.Handle}
			decode("typed")
			if !st.IsError || st.Handle == "" || !strings.HasPrefix(st.Text, "Not a failure") {
				t.Fatalf("plain call of a tool with an output schema: %+v", st)
			}
			handles = append(handles, st.Handle)
			for _, h := range handles {
				if bt, err := e.bus.Tasks().Get(t.Context(), s, h); err != nil || !bt.Running() {
					t.Fatalf("bus task %s of the plain call: %+v %v", h, bt, err)
				}
			}

			if got := p.next(t, "output"); !strings.HasSuffix(got.Message, "; output so far: brewing") {
				t.Fatalf("tasks/get while it runs: %q", got.Message)
			}
			if got := p.next(t, "listed"); len(got.Names) != 3 {
				t.Fatalf("tasks/list: %v", got.Names)
			}
			for _, step := range []string{"other", "other-cancel"} {
				if got := p.next(t, step); !strings.Contains(got.Message, "task not found") {
					t.Fatalf("%s: another session's host: %q", step, got.Message)
				}
			}
			var cancelled struct {
				Status string `json:"status"`
			}
			if err := json.Unmarshal(p.nextRaw(t, "cancelled"), &cancelled); err != nil || cancelled.Status != "cancelled" {
				t.Fatalf("tasks/cancel: %+v %v", cancelled, err)
			}
			recvStopped(t, stopped)
			p.next(t, "waiting")
			p.say(t, "release")
			for range 4 { // the two plain calls' bus tasks and two MCP tasks
				select {
				case release <- struct{}{}:
				case <-time.After(bound):
					t.Fatal("no brew to release")
				}
			}
			if got := p.next(t, "both"); !slices.Equal(got.Names, []string{"brewed", "brewed"}) {
				t.Fatalf("the two tasks: %v", got.Names)
			}
			if got := p.next(t, "after"); got.Message != "cancelled" {
				t.Fatalf("the cancelled task afterwards: %q", got.Message)
			}
			ts, err := e.bus.Tasks().Wait(t.Context(), s, bound, handles...)
			if err != nil || len(ts) != 2 || ts[0].State != bus.StateSuccess || ts[1].State != bus.StateSuccess {
				t.Fatalf("the plain calls' bus tasks: %+v %v", ts, err)
			}
			p.next(t, "done")
		})
	}
}

// recvStopped waits for one brew call's cancellation at the worker.
func recvStopped(t *testing.T, stopped <-chan string) {
	t.Helper()
	select {
	case <-stopped:
	case <-time.After(bound):
		t.Fatal("tasks/cancel did not stop the tool's run")
	}
}

// serveStdio serves session s to alice as `toolbus mcp` does
// (Facade.ServeStdio) on the first connection to a new local port, and
// returns the port.
func serveStdio(t *testing.T, e *env, s string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	served, conns := make(chan error, 1), make(chan net.Conn, 1)
	go func() {
		conn, err := l.Accept()
		_ = l.Close()
		if err != nil {
			served <- err
			return
		}
		conns <- conn
		served <- e.f.ServeStdio(ctx, s, "alice", conn, conn)
	}()
	t.Cleanup(func() {
		stop()
		_ = l.Close()
		select {
		case conn := <-conns:
			_ = conn.Close()
		default:
		}
		<-served
	})
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}
