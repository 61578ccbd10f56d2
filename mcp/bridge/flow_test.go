package bridge

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

var allTools = []string{"mcp__t__echo", "mcp__t__readxfile", "mcp__t__media", "mcp__t__weather", "mcp__t__same", "mcp__t__fail", "mcp__t__slow"}

// checkDefinitions checks the hint mapping and the kept schemas.
func checkDefinitions(t *testing.T, defs map[string]bus.ToolDef) {
	t.Helper()
	echo := defs["mcp__t__echo"]
	if !echo.ReadOnly || echo.Permission != bus.PermissionAllow || !echo.Idempotent || echo.ConcurrencySafe || echo.StateInjected {
		t.Errorf("echo: %+v", echo)
	}
	if echo.MCP == nil || echo.MCP.Server != "t" || echo.MCP.Tool != "echo" || echo.MCP.TaskSupport != "" {
		t.Errorf("echo mcp member: %+v", echo.MCP)
	}
	if !strings.Contains(string(echo.InputSchema), `"text"`) || len(echo.Groups) != 1 || echo.Groups[0] != "mcpt" {
		t.Errorf("echo schema/groups: %s %v", echo.InputSchema, echo.Groups)
	}
	rf := defs["mcp__t__readxfile"]
	if rf.ReadOnly || rf.Permission != bus.PermissionAsk || rf.Idempotent || rf.MCP.Tool != "read.file" || rf.Title != "Read a file" {
		t.Errorf("read.file: %+v", rf)
	}
	// Every annotation as the server sent it: destructiveHint false stays
	// false (mcp-go's NewTool sends every hint).
	f, tr := false, true
	if a := rf.MCP.Annotations; a == nil || !reflect.DeepEqual(*a, bus.MCPAnnotations{Title: "Read a file", ReadOnlyHint: &f, DestructiveHint: &f, IdempotentHint: &f, OpenWorldHint: &tr}) {
		t.Errorf("read.file annotations: %+v", rf.MCP.Annotations)
	}
	if w := defs["mcp__t__weather"]; !strings.Contains(string(w.OutputSchema), `"temp"`) {
		t.Errorf("weather output schema: %s", w.OutputSchema)
	}
	long := ToolName("t", longTool)
	if d, ok := defs[long]; !ok || !d.Idempotent || d.MCP.Tool != longTool {
		t.Errorf("long tool %s: %+v", long, d)
	}
}

// checkCalls checks calls and the result mapping.
func checkCalls(t *testing.T, e *env) {
	t.Helper()
	if r := e.call("mcp__t__echo", map[string]any{"text": "hi"}); r.State != bus.StateSuccess || text(r) != "hi" {
		t.Errorf("echo: %+v", r)
	}
	r := e.call("mcp__t__media", map[string]any{})
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	prio := 0.25
	want := []bus.Block{{Type: "text", Text: "hello", Annotations: &bus.Annotations{Audience: []string{"user"}, Priority: &prio, LastModified: "2026-01-02T03:04:05Z"}},
		{Type: "data", MediaType: "image/png", Data: b64("png")},
		{Type: "data", MediaType: "audio/wav", Data: b64("wav")}, {Type: "text", Text: "resource text", URI: "file:///a.txt", MediaType: "text/plain"},
		{Type: "data", MediaType: "application/pdf", Data: b64("png"), URI: "file:///b.bin"},
		{Type: "data", MediaType: "application/pdf", URL: "https://example.com/c.pdf", Name: "c", Description: "The C report.",
			Annotations: &bus.Annotations{Audience: []string{"assistant"}}}}
	if r.State != bus.StateSuccess || len(r.Output) != len(want) {
		t.Fatalf("media: %+v", r)
	}
	for i := range want {
		if !reflect.DeepEqual(r.Output[i], want[i]) {
			t.Errorf("media block %d: got %+v want %+v", i, r.Output[i], want[i])
		}
	}
	// structuredContent: one application/json data block after the text,
	// which stays as the server sent it.
	r = e.call("mcp__t__weather", map[string]any{})
	if len(r.Output) != 2 || r.Output[0] != (bus.Block{Type: "text", Text: "4 degrees"}) ||
		r.Output[1] != (bus.Block{Type: "data", MediaType: "application/json", Data: b64(`{"temp":4}`)}) {
		t.Errorf("weather: %+v", r.Output)
	}
	r = e.call("mcp__t__same", map[string]any{})
	if len(r.Output) != 2 || r.Output[0].Text != `{"a":1}` || r.Output[1].MediaType != "application/json" || r.Output[1].Data != b64(`{"a":1}`) {
		t.Errorf("same: %+v", r.Output)
	}
	if r := e.call("mcp__t__fail", map[string]any{}); r.State != bus.StateError || text(r) != "it broke" || r.Error == nil || r.Error.Code != bus.CodeToolError {
		t.Errorf("fail: %+v %+v", r, r.Error)
	}
	if r := e.call("mcp__t__echo", map[string]any{"text": 3}); r.State != bus.StateError || r.Error.Code != bus.CodeInvalidInput {
		t.Errorf("validation through the kept schema: %+v", r)
	}
}

// checkProgressAndCancel calls slow, sees its progress events, cancels it
// with P.cancel and waits until the server saw the cancellation.
func checkProgressAndCancel(t *testing.T, e *env, cancelled func(id string) bool) {
	t.Helper()
	ctx := t.Context()
	ev, err := e.client.Watch(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	reply, err := e.client.Publish("s1", bus.Batch{Calls: []bus.Call{{ID: "slow1", Name: "mcp__t__slow", Input: client.Input(map[string]any{"id": "slow1"})}}})
	if err != nil {
		t.Fatal(err)
	}
	var progress []string
	timeout := time.After(bound)
	for len(progress) < 2 {
		select {
		case m := <-ev.C:
			if m.Type == bus.TypeCallProgress && m.ToolCallID == "slow1" {
				var p bus.Progress
				_ = m.DataAs(&p)
				progress = append(progress, p.Output[0].Text)
			}
		case <-timeout:
			t.Fatalf("progress: got %v", progress)
		}
	}
	slices.Sort(progress) // over HTTP, mcp-go may hand notifications on out of order
	if progress[0] != "step (1/2)" || progress[1] != "step (2/2)" {
		t.Errorf("progress: %v", progress)
	}
	if err := e.client.Cancel(ctx, "s1", reply); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case m := <-ev.C:
			if m.Type != bus.TypeCallResult {
				continue
			}
			var r bus.Result
			_ = m.DataAs(&r)
			if r.State != bus.StateInterrupted {
				t.Errorf("cancelled call: %+v", r)
			}
		case <-timeout:
			t.Fatal("no result for the cancelled call")
		}
		break
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if !cancelled("slow1") {
			return errNotYet
		}
		return nil
	})
}

// checkDeadline calls slow on the server entry with a short timeout: the
// call times out and the server's request is cancelled.
func checkDeadline(t *testing.T, e *env, cancelled func(id string) bool) {
	t.Helper()
	r := e.call("mcp__short__slow", map[string]any{"id": "late"})
	if r.State != bus.StateError || r.Error == nil || r.Error.Code != bus.CodeTimeout {
		t.Fatalf("deadline: %+v", r)
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if !cancelled("late") {
			return errNotYet
		}
		return nil
	})
}

func fileFor(s Server) *File {
	s.Name, s.Group, s.DisableTools = "t", "mcpt", []string{"grow"}
	short := s
	short.Name, short.Group, short.DisableTools, short.EnableTools, short.Timeout = "short", "", nil, []string{"slow"}, "400ms"
	if s.Env != nil {
		short.Env = maps.Clone(s.Env)
		short.Env["BRIDGE_TEST_PID_FILE"] += ".short"
	}
	return &File{Groups: []bus.Group{{Name: "mcpt", Description: "The test server.", Scope: bus.ScopeMeta, ActiveByDefault: true}},
		Servers: []Server{s, short}}
}

func TestStdio(t *testing.T) {
	e := newEnv(t)
	s, pidFile, cancelFile := stdioServer(t, "t")
	// Longer between reconnections than three heartbeats, so the test sees
	// the tools gone even when a heartbeat overtakes the leave.
	b := e.bridge(fileFor(s), func(c *Config) { c.MinBackoff, c.MaxBackoff = 3*time.Second, 3*time.Second })
	defs := e.waitTools(append(allTools, "mcp__short__slow"), []string{"mcp__t__grow", "mcp__short__echo"})
	checkDefinitions(t, defs)
	checkCalls(t, e)
	cancelled := func(id string) bool {
		data, _ := os.ReadFile(cancelFile)
		return strings.Contains(string(data), id+"\n")
	}
	checkProgressAndCancel(t, e, cancelled)
	checkDeadline(t, e, cancelled)

	// Killed: only its tools leave, and come back with the new process.
	before := b.Tools("short")
	pid := readPID(t, pidFile)
	_ = os.Remove(pidFile)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.waitTools([]string{"mcp__short__slow"}, allTools)
	if got := b.Tools("short"); len(got) != len(before) {
		t.Fatalf("the other server's tools changed: %v", got)
	}
	e.waitTools(allTools, nil)
	if readPID(t, pidFile) == pid {
		t.Fatal("not restarted")
	}
	if r := e.call("mcp__t__echo", map[string]any{"text": "back"}); text(r) != "back" {
		t.Fatalf("after restart: %+v", r)
	}
}

func TestHTTP(t *testing.T) {
	for _, sse := range []bool{false, true} {
		name := "streamable"
		if sse {
			name = "sse"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			rec := newRecorder()
			h := startHTTP(t, sse, rec)
			tr := TransportHTTP
			if sse {
				tr = TransportSSE
			}
			e.bridge(fileFor(Server{Transport: tr, URL: h.url()}))
			defs := e.waitTools(append(allTools, "mcp__short__slow"), nil)
			checkDefinitions(t, defs)
			checkCalls(t, e)
			checkProgressAndCancel(t, e, rec.wasCancelled)
			checkDeadline(t, e, rec.wasCancelled)
		})
	}
}

// TestListChanged: a server that adds a tool and says so gets it
// registered.
func TestListChanged(t *testing.T) {
	e := newEnv(t)
	h := startHTTP(t, false, newRecorder())
	b := e.bridge(&File{Servers: []Server{{Name: "t", URL: h.url(), DisableTools: []string{"grown2"}, EnableTools: nil}}})
	e.waitTools([]string{"mcp__t__grow"}, []string{"mcp__t__grown"})
	if got := b.Unknown("t"); len(got) != 1 || got[0] != "grown2" {
		t.Fatalf("unknown names before grow: %v", got)
	}
	if r := e.call("mcp__t__grow", map[string]any{"name": "grown"}); r.State != bus.StateSuccess {
		t.Fatalf("grow: %+v", r)
	}
	e.waitTools([]string{"mcp__t__grown", "mcp__t__echo"}, nil)
	if r := e.call("mcp__t__grown", map[string]any{}); text(r) != "grown" {
		t.Fatalf("grown: %+v", r)
	}
	// A disabled name that the server comes to have is no longer unknown.
	if r := e.call("mcp__t__grow", map[string]any{"name": "grown2"}); r.State != bus.StateSuccess {
		t.Fatalf("grow: %+v", r)
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if got := b.Unknown("t"); len(got) != 0 {
			return fmt.Errorf("unknown names after grow: %v", got)
		}
		return nil
	})
	e.waitTools([]string{"mcp__t__grown"}, []string{"mcp__t__grown2"})
}

// TestServerKilled: of two servers, the one killed loses its tools, the
// other keeps its; after the restart they are back.
func TestServerKilled(t *testing.T) {
	e := newEnv(t)
	a := startHTTP(t, false, newRecorder())
	bsrv := startHTTP(t, false, newRecorder())
	e.bridge(&File{Servers: []Server{{Name: "a", URL: a.url(), EnableTools: []string{"echo", "slow"}},
		{Name: "b", URL: bsrv.url(), EnableTools: []string{"echo"}}}})
	e.waitTools([]string{"mcp__a__echo", "mcp__a__slow", "mcp__b__echo"}, []string{"mcp__a__fail"})

	// A call in flight when the server dies ends with an error.
	done := make(chan bus.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		reply, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "inflight", Name: "mcp__a__slow", Input: client.Input(map[string]any{"id": "x"})}}})
		if err != nil || len(reply.Results) != 1 {
			done <- bus.Result{State: "no reply"}
			return
		}
		done <- reply.Results[0]
	}()
	a.waitStarted(t)
	a.kill()
	if r := <-done; r.State == bus.StateSuccess {
		t.Fatalf("call on a killed server: %+v", r)
	}
	e.waitTools([]string{"mcp__b__echo"}, []string{"mcp__a__echo", "mcp__a__slow"})
	if r := e.call("mcp__b__echo", map[string]any{"text": "still"}); text(r) != "still" {
		t.Fatalf("b: %+v", r)
	}
	a.start()
	e.waitTools([]string{"mcp__a__echo", "mcp__b__echo"}, nil)
	if r := e.call("mcp__a__echo", map[string]any{"text": "back"}); text(r) != "back" {
		t.Fatalf("a after restart: %+v", r)
	}
}
