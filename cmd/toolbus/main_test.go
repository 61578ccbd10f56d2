package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// testHeartbeat is the workers' beat in these tests. A router declares a
// worker gone after three missed beats and ends its calls unknown_outcome;
// at 500 ms a race-built worker decoding a 2 MiB input on a loaded 2-core
// machine missed them (TestCallInputFromFile). No test here waits for a
// worker to be declared gone, so the beat can be slow.
const testHeartbeat = 2 * time.Second

// deployment is a nats-server, one router and a worker serving the built-in
// tools plus "block", which runs until its call is cancelled and reports on
// started when it begins.
type deployment struct {
	x       *xtest.Deployment
	url     string
	client  *client.Client
	started chan string
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat})
	d := &deployment{x: x, url: x.URL(0), started: make(chan string, 1)}
	nc, err := x.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	d.client = client.New(nc, client.Config{})
	_, err = x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		if err := builtin.RegisterWith(t.Context(), w, builtin.Config{}); err != nil {
			return err
		}
		return worker.Register(w, bus.ToolDef{Name: "block", Description: "Run until cancelled.", ReadOnly: true},
			func(ctx context.Context, c *worker.Call, _ struct{}) (string, error) {
				d.started <- c.ReplyID
				<-ctx.Done()
				return "", ctx.Err()
			})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.WaitLive(t.Context(), "get_current_time", "echo", "block"); err != nil {
		t.Fatal(err)
	}
	return d
}

// exec runs the command line and returns its stdout, stderr and error.
func exec(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	err = run(ctx, args, &o, &e)
	return o.String(), e.String(), err
}

func TestCallTime(t *testing.T) {
	d := newDeployment(t)
	out, errOut, err := exec(t.Context(), "call", "get_current_time", `{"timezone":"UTC"}`, "--nats", d.url)
	if err != nil {
		t.Fatalf("run: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "get_current_time: success" {
		t.Fatalf("output:\n%s", out)
	}
	at, err := time.Parse(time.RFC3339, lines[1])
	if err != nil {
		t.Fatalf("not a time: %q: %v", lines[1], err)
	}
	if _, off := at.Zone(); off != 0 || time.Since(at).Abs() > time.Minute {
		t.Fatalf("time %v is not the current UTC time", at)
	}
}

func TestCallUnknownTool(t *testing.T) {
	d := newDeployment(t)
	out, _, err := exec(t.Context(), "call", "nope", "{}", "--nats", d.url)
	if err == nil {
		t.Fatal("want an error for an unknown tool")
	}
	if !strings.Contains(err.Error(), bus.CodeUnknownTool) {
		t.Errorf("error %q does not name %s", err, bus.CodeUnknownTool)
	}
	if !strings.Contains(out, "ToolNotFoundError: The tool named 'nope' doesn't exist.") {
		t.Errorf("output:\n%s", out)
	}
}

func TestCallJSON(t *testing.T) {
	d := newDeployment(t)
	out, _, err := exec(t.Context(), "call", "--json", "echo", `{"text":"hi"}`, "--reply-id", "r-json", "--session", "s1", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var reply bus.Reply
	if err := json.Unmarshal([]byte(out), &reply); err != nil {
		t.Fatalf("output is not a reply: %v\n%s", err, out)
	}
	if len(reply.Results) != 1 || reply.Results[0].ID != "call-r-json" || reply.Results[0].Output[0].Text != "hi" {
		t.Fatalf("reply: %+v", reply)
	}
}

func TestCallInvalidInput(t *testing.T) {
	d := newDeployment(t)
	out, _, err := exec(t.Context(), "call", "echo", `{"text":5}`, "--nats", d.url)
	if err == nil || !strings.Contains(err.Error(), bus.CodeInvalidInput) {
		t.Fatalf("error: %v", err)
	}
	if !strings.HasPrefix(out, "echo: error (invalid_input)\nInput validation failed for tool 'echo':\n/text: ") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestCallNoRouter(t *testing.T) {
	s := testkit.RunServer(t)
	_, _, err := exec(t.Context(), "call", "echo", `{"text":"hi"}`, "--nats", s.ClientURL())
	if err == nil || !strings.Contains(err.Error(), "no router") {
		t.Fatalf("error: %v", err)
	}
}

// TestNewcomerHints: the errors a first run meets say what to do: no
// server at the URL names the router to start and --nats; an audit of a
// deployment whose routers keep none names the config block.
func TestNewcomerHints(t *testing.T) {
	_, _, err := exec(t.Context(), "status", "--nats", "nats://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "is a router running? start one with `go run ./cmd/router`, or name the deployment with --nats or $NATS_URL") {
		t.Errorf("status on no server: %v", err)
	}
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat})
	if _, _, err := exec(t.Context(), "audit", "--nats", x.URL(0)); err == nil || !strings.Contains(err.Error(), "until their --config has an audit block (docs/guardrails.md)") {
		t.Errorf("audit without an audit block: %v", err)
	}
}

func TestCallRejected(t *testing.T) {
	var out bytes.Buffer
	err := callError(t.Context(), nil, "cli", "r1", bus.Errorf(bus.CodeBadRequest, "agent_only cannot include external tools"), true, &out)
	if err == nil || err.Error() != "batch rejected: bad_request: agent_only cannot include external tools" {
		t.Fatalf("error: %v", err)
	}
	var be bus.Error
	if json.Unmarshal(out.Bytes(), &be) != nil || be.Code != bus.CodeBadRequest {
		t.Fatalf("json output: %s", out.String())
	}
}

// TestCancel checks that `cancel` ends a running call.
func TestCancel(t *testing.T) {
	d := newDeployment(t)
	type outcome struct {
		err error
		out string
	}
	done := make(chan outcome, 1)
	go func() {
		out, _, err := exec(t.Context(), "call", "block", "--reply-id", "r-cancel", "--nats", d.url)
		done <- outcome{err, out}
	}()
	select {
	case id := <-d.started:
		if id != "r-cancel" {
			t.Fatalf("reply id %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("block never started")
	}
	out, _, err := exec(t.Context(), "cancel", "r-cancel", "call-r-cancel", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	if out != "cancelled: call-r-cancel of reply r-cancel in session cli\n" {
		t.Fatalf("cancel output %q", out)
	}
	_, _, err = exec(t.Context(), "cancel", "r-nosuch", "--wait", "200ms", "--nats", d.url)
	if err == nil || !strings.Contains(err.Error(), "nothing was cancelled: no call of reply r-nosuch in session cli") {
		t.Fatalf("cancel of an unknown reply: %v", err)
	}
	select {
	case o := <-done:
		if o.err == nil || !strings.Contains(o.out, "block: interrupted") || !strings.Contains(o.out, bus.InterruptedText) {
			t.Fatalf("call: %v\n%s", o.err, o.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("call did not end after cancel")
	}
}

// TestCallInterrupted checks that an interrupted `call` cancels its reply
// on the bus.
func TestCallInterrupted(t *testing.T) {
	d := newDeployment(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events, err := d.client.Watch(t.Context(), defaultSession)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Stop(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := exec(ctx, "call", "block", "--reply-id", "r-int", "--nats", d.url)
		done <- err
	}()
	select {
	case <-d.started:
	case <-time.After(10 * time.Second):
		t.Fatal("block never started")
	}
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("error: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("call did not return")
	}
	// The cancel the command sent ends the call on the bus.
	for {
		select {
		case e := <-events.C:
			var r bus.Result
			if e.Type == bus.TypeCallResult && e.ReplyID == "r-int" && e.DataAs(&r) == nil {
				if r.State != bus.StateInterrupted {
					t.Fatalf("state %s", r.State)
				}
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no result event for the interrupted call")
		}
	}
}

func TestTools(t *testing.T) {
	d := newDeployment(t)
	out, _, err := exec(t.Context(), "tools", "--format", "openai", "--json", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, out)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Function.Name)
		if tool.Type != "function" {
			t.Errorf("type %q", tool.Type)
		}
	}
	if !strings.Contains(strings.Join(names, ","), "echo") {
		t.Fatalf("echo is not listed: %v", names)
	}

	// --format alone prints exactly the tools array the model sees.
	for _, tc := range []struct{ format, nameKey string }{
		{"openai", "function"}, {"anthropic", "input_schema"}, {"mcp", "inputSchema"}, {"toolbus", "input_schema"}, {"gemini", "parametersJsonSchema"},
	} {
		out, _, err := exec(t.Context(), "tools", "--format", tc.format, "--nats", d.url)
		if err != nil {
			t.Fatal(err)
		}
		var tools []map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &tools); err != nil {
			t.Fatalf("--format %s: output is not a JSON array: %v\n%s", tc.format, err, out)
		}
		if len(tools) == 0 || tools[0][tc.nameKey] == nil {
			t.Errorf("--format %s: %s", tc.format, out)
		}
	}
	// --deferred (docs/protocol.md 4.1): without meta groups, the ordinary listing.
	out, _, err = exec(t.Context(), "tools", "--format", "openai-responses", "--deferred", "--nats", d.url)
	var deferred []map[string]json.RawMessage
	if err != nil || json.Unmarshal([]byte(out), &deferred) != nil || len(deferred) == 0 || string(deferred[0]["type"]) != `"function"` {
		t.Fatalf("--deferred: %v\n%s", err, out)
	}
	out, _, err = exec(t.Context(), "tools", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"echo — Send the given text back unchanged.\n", "get_current_time — ", "groups:\n", "  [x] basic"} {
		if !strings.Contains(out, want) {
			t.Errorf("readable output lacks %q:\n%s", want, out)
		}
	}
}

func TestWatch(t *testing.T) {
	d := newDeployment(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"watch", "--session", "w1", "--nats", d.url}, &stdout, &stderr) }()
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if !strings.Contains(stderr.String(), "watching toolbus.events.w1") {
			return errors.New("watch has not started")
		}
		return nil
	})
	if _, err := d.client.Call(t.Context(), "w1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: client.Input(map[string]string{"text": "hello watcher"})}}}); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		// docs/protocol.md 3.4: the result comes in batch.done, one line per call.
		if !strings.Contains(stdout.String(), " io.toolbus.batch.done c1 echo success: hello watcher\n") {
			return fmt.Errorf("no result line in:\n%s", stdout.String())
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not return after cancel")
	}
}

func TestWatchReplay(t *testing.T) {
	d := newDeployment(t)
	if _, err := d.client.Call(t.Context(), "w2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: client.Input(map[string]string{"text": "earlier"})}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", "--replay", "--session", "*", "--nats", d.url}, &stdout, &stderr)
	}()
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if !strings.Contains(stdout.String(), " w2 io.toolbus.batch.done c1 echo success: earlier\n") {
			return fmt.Errorf("no replayed result line in:\n%s", stdout.String())
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not return after cancel")
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error
	}{
		{"unknown help topic", []string{"help", "nosuch"}, `no help topic "nosuch"`},
		{"unknown", []string{"bogus"}, `unknown command "bogus"`},
		{"call without tool", []string{"call"}, "got 0 arguments"},
		{"call too many", []string{"call", "echo", "{}", "extra"}, "got 3 arguments"},
		{"call bad json", []string{"call", "echo", "{text"}, "is not JSON"},
		{"call bad tool name", []string{"call", "no.dots", "{}"}, "tool name"},
		{"call bad reply id", []string{"call", "echo", "--reply-id", "a b"}, "--reply-id"},
		{"call bad session", []string{"call", "echo", "--session", "a.b"}, "--session"},
		{"call unknown flag", []string{"call", "echo", "--bogus"}, "flag provided but not defined"},
		{"tools bad format", []string{"tools", "--format", "xml"}, `unknown --format "xml" (want toolbus, openai, openai-responses, anthropic, gemini, mcp)`},
		{"tools argument", []string{"tools", "x"}, "no arguments"},
		{"tools deferred in a format without it", []string{"tools", "--format", "openai", "--deferred"}, "--deferred needs --format openai-responses or anthropic"},
		{"watch argument", []string{"watch", "x"}, "no arguments"},
		{"cancel without id", []string{"cancel"}, "needs a reply id"},
		{"cancel bad id", []string{"cancel", "r1", "c.1"}, `id "c.1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := exec(t.Context(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if !strings.Contains(errOut, "usage: toolbus") {
				t.Fatalf("no usage on stderr:\n%s", errOut)
			}
		})
	}
}

// TestHelp: help that is asked for goes to stdout and ends with
// flag.ErrHelp, which cli.Main turns into exit status 0; a command's own
// flags come before the connection flags, which are listed once.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"help"}, {"-h"}, {"--help"}, {"help", "call"}, {"watch", "-h"}, {"call", "echo", "--help"}} {
		out, errOut, err := exec(t.Context(), args...)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%v: error %v, want flag.ErrHelp", args, err)
		}
		if errOut != "" || !strings.Contains(out, "usage: toolbus") {
			t.Errorf("%v: stdout %q, stderr %q", args, out, errOut)
		}
	}
	out, _, _ := exec(t.Context(), "help", "call")
	own, conn := strings.Index(out, "-reply-id"), strings.Index(out, "connection flags")
	if own < 0 || conn < own || strings.Count(out, "-nkey") != 1 {
		t.Errorf("help call: its own flags first, then the connection flags once:\n%s", out)
	}
	for _, name := range []string{"skills", "parked", "status", "audit"} {
		out, _, _ = exec(t.Context(), "help", name)
		if strings.Contains(out, "the same as --user") || !strings.Contains(out, "-nats-user string") {
			t.Errorf("help %s: --user is the toolbus user, --nats-user the NATS one:\n%s", name, out)
		}
	}
	if out, _, _ = exec(t.Context(), "help"); !strings.Contains(out, "--user is always the toolbus user") {
		t.Errorf("help: says nothing of --user:\n%s", out)
	}
}

// TestUserIsTheToolbusUser: --user is the toolbus user in every command
// (docs: toolbus help). A command that cannot apply it refuses it, before
// connecting, and names --nats-user, the NATS login; it is never ignored.
func TestUserIsTheToolbusUser(t *testing.T) {
	for _, args := range [][]string{
		{"parked", "--all", "--user", "alice"},
		{"confirm", "c1", "--user=alice"},
		{"answer", "c1", "ok", "-user", "alice"},
		{"cancel", "r1", "--user", "alice"},
		{"watch", "--user", "alice"},
		{"status", "--user", "alice"},
		{"inbox", "--user", "alice"},
		{"fetch", "nats-object://toolbus_outputs/x", "--user", "alice"},
		{"groups", "--user", "alice"},
		{"reset", "--user", "alice"},
		{"session", "show", "--user", "alice"},
		{"activate", "g", "--user", "alice"},
		{"watch-handoff", "t", "--user", "alice"},
	} {
		// An unreachable server: a command that ignored --user would fail
		// later, on connecting, with another error.
		out, errOut, err := exec(t.Context(), append(args, "--nats", "nats://127.0.0.1:1")...)
		if err == nil || !strings.Contains(err.Error(), "has no --user") || !strings.Contains(err.Error(), "--nats-user") {
			t.Errorf("%v: err %v, stdout %q, stderr %q; want a refusal naming --nats-user", args, err, out, errOut)
		}
	}
	// After "--" it is an argument, not a flag.
	if _, _, err := exec(t.Context(), "answer", "--nats", "nats://127.0.0.1:1", "c1", "--", "--user"); err != nil && strings.Contains(err.Error(), "has no --user") {
		t.Errorf("answer c1 -- --user: %v", err)
	}
}

// TestMistakeGetsOneUsageLine: a wrong flag or argument gets the error and
// one usage line naming -h, not the 40 lines of every flag that pushed
// the error out of sight; -h still lists every flag.
func TestMistakeGetsOneUsageLine(t *testing.T) {
	for _, args := range [][]string{{"call", "--bogus"}, {"answer", "c1"}, {"parked", "a", "b"}} {
		_, errOut, err := exec(t.Context(), args...)
		if err == nil || strings.Count(errOut, "\n") > 2 || !strings.Contains(errOut, "usage: toolbus "+args[0]) || !strings.Contains(errOut, "-h lists the flags") {
			t.Errorf("%v: err %v, stderr:\n%s", args, err, errOut)
		}
	}
	out, _, err := exec(t.Context(), "call", "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out, "-reply-id") || !strings.Contains(out, "-nats-user") {
		t.Errorf("call -h: %v\n%s", err, out)
	}
}
