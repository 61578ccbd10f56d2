// Package readme runs the README's commands as written, where they can run
// headless: the quick start, a large output fetched back, a confirmation
// and an answer by call id, and the secure start-up line's `source`. Each
// command is taken from README.md itself (so an edit there is tested), with
// `go run ./cmd/X` replaced by a binary built once, placeholders such as
// <call-id> filled in, and the router on a free address. The MCP host
// commands are run as written by test/mcpinterop (where node exists).
package readme

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// bound limits every wait; generous, for a loaded machine.
const bound = 2 * time.Minute

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// bins builds cmd/router, cmd/toolbus and cmd/toolworker once per run.
func bins(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "toolbus-readme-")
		if buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binDir+"/", "./cmd/router", "./cmd/toolbus", "./cmd/toolworker")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// command returns the README's first inline command (a `...` span) that
// starts with prefix; the test fails when the README has none.
func command(t *testing.T, prefix string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\n  ", " ") // a span may wrap onto an indented line
	re := regexp.MustCompile("`(" + regexp.QuoteMeta(prefix) + "[^`]*)`")
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("README.md has no command starting %q", prefix)
	}
	return m[1]
}

// shell runs line with bash, `go run ./cmd/X` being the built binary X,
// in dir with env added; it returns stdout, stderr and the exit code.
func shell(t *testing.T, dir string, env []string, line string) (string, string, int) {
	t.Helper()
	script := local(t, line) // builds the binaries on first use: not within the command's bound
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", line, err)
	}
	return stdout.String(), stderr.String(), code
}

// local replaces `go run ./cmd/X` (and a bare `toolbus` at the start) by
// the built binaries.
func local(t *testing.T, line string) string {
	dir := bins(t)
	for _, name := range []string{"router", "toolbus", "toolworker"} {
		line = strings.ReplaceAll(line, "go run ./cmd/"+name, filepath.Join(dir, name))
	}
	if strings.HasPrefix(line, "toolbus ") {
		line = filepath.Join(dir, "toolbus") + line[len("toolbus"):]
	}
	return strings.ReplaceAll(line, "&& toolbus ", "&& "+filepath.Join(dir, "toolbus")+" ")
}

// background starts line (as shell does) until the test ends, and waits
// for its stdout to match ready.
func background(t *testing.T, dir string, env []string, line string, ready *regexp.Regexp) (*testkit.Buffer, []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "bash", "-c", "exec "+local(t, line))
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	stdout, stderr := new(testkit.Buffer), new(testkit.Buffer)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-done // bounded by WaitDelay
	})
	var m []string
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("%s ended: %v\nstdout %s\nstderr %s", line, err, stdout.String(), stderr.String())
		default:
		}
		if m = ready.FindStringSubmatch(stdout.String()); m == nil {
			return fmt.Errorf("%s: not ready; stdout so far:\n%s\nstderr:\n%s", line, stdout.String(), stderr.String())
		}
		return nil
	})
	return stdout, m
}

// router starts the README's `go run ./cmd/router` with extra flags on a
// fresh store and returns its NATS URL.
func router(t *testing.T, extra string) string {
	t.Helper()
	line := "go run ./cmd/router --data " + filepath.Join(t.TempDir(), "data") + " " + extra
	_, m := background(t, t.TempDir(), nil, line, regexp.MustCompile(`serving prefix "toolbus" on (\S+)`))
	return m[1]
}

// freePort is a loopback address free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestQuickStart: a router, a call, the tool listing, and a large output
// fetched back, as the README's "Run a router" and "Call a tool" say.
func TestQuickStart(t *testing.T) {
	if !strings.Contains(command(t, "go run ./cmd/router"), "go run ./cmd/router") {
		t.Fatal("no router command")
	}
	url := router(t, "--listen 127.0.0.1:-1")
	env := []string{"NATS_URL=" + url}
	dir := t.TempDir()
	out, errOut, code := shell(t, dir, env, command(t, "go run ./cmd/toolbus call get_current_time"))
	if code != 0 || !strings.Contains(out, fmt.Sprint(time.Now().UTC().Year())) {
		t.Fatalf("call get_current_time: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, c := range []struct{ prefix, want string }{
		{"go run ./cmd/toolbus tools", "get_current_time"},
		{"go run ./cmd/toolbus tools --format openai", `"type": "function"`},
	} {
		if out, errOut, code := shell(t, dir, env, command(t, c.prefix)); code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d\n%s\n%s", c.prefix, code, out, errOut)
		}
	}
	// "to try it: `go run ./cmd/toolworker`, then `go run ./cmd/toolbus call big_text ...`"
	background(t, dir, env, command(t, "go run ./cmd/toolworker"), regexp.MustCompile(`serving .*big_text`))
	out, errOut, code = shell(t, dir, env, command(t, "go run ./cmd/toolbus call big_text"))
	ref := regexp.MustCompile(`nats-object://\S+#sha256=[0-9a-f]+`).FindString(out)
	if code != 0 || ref == "" {
		t.Fatalf("call big_text: exit %d, no reference\n%s\n%s", code, out, errOut)
	}
	fetch := strings.Replace(command(t, "go run ./cmd/toolbus fetch"), "REF", ref, 1)
	if out, errOut, code := shell(t, dir, env, fetch); code != 0 {
		t.Fatalf("%s: exit %d\n%s\n%s", fetch, code, out, errOut)
	}
	if fi, err := os.Stat(filepath.Join(dir, "out.txt")); err != nil || fi.Size() != 2048<<10 {
		t.Fatalf("out.txt: %v %v", fi, err)
	}
}

// TestConfirmAndAnswer: a write parks for a confirmation and an external
// call for its answer; the README's `toolbus confirm <call-id>` and
// `toolbus answer <call-id> 'the output'`, with the id the call printed
// and no --session, finish them.
func TestConfirmAndAnswer(t *testing.T) {
	work := t.TempDir()
	url := router(t, "--listen 127.0.0.1:-1 --workdir "+work)
	env := []string{"NATS_URL=" + url}
	dir := t.TempDir()

	out, errOut, code := shell(t, dir, env, `go run ./cmd/toolbus call write_file '{"path":"a.txt","content":"hi"}'`)
	id := regexp.MustCompile(`toolbus confirm (\S+)`).FindStringSubmatch(out + errOut)
	if code != 3 || id == nil {
		t.Fatalf("a write: exit %d, want 3 and a confirm command\n%s\n%s", code, out, errOut)
	}
	confirm := strings.Replace(command(t, "toolbus confirm <call-id>"), " [--remember] [--deny]", "", 1)
	confirm = strings.Replace(confirm, "<call-id>", id[1], 1)
	if out, errOut, code := shell(t, dir, env, confirm); code != 0 {
		t.Fatalf("%s: exit %d\n%s\n%s", confirm, code, out, errOut)
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		b, err := os.ReadFile(filepath.Join(work, "a.txt"))
		if err != nil || string(b) != "hi" {
			return fmt.Errorf("a.txt: %q %v", b, err)
		}
		return nil
	})

	registerExternal(t, url, "approve_po")
	waiting, _ := background(t, dir, env, `go run ./cmd/toolbus call --wait approve_po '{}'`, regexp.MustCompile(`toolbus answer (\S+)`))
	id = regexp.MustCompile(`toolbus answer (\S+)`).FindStringSubmatch(waiting.String())
	answer := strings.Replace(command(t, "toolbus answer <call-id>"), "<call-id>", id[1], 1)
	if out, errOut, code := shell(t, dir, env, answer); code != 0 {
		t.Fatalf("%s: exit %d\n%s\n%s", answer, code, out, errOut)
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if !strings.Contains(waiting.String(), "the output") {
			return errors.New("the waiting call has no result yet")
		}
		return nil
	})
}

// registerExternal registers an external tool with one io.toolbus.register
// request, as the README's Go snippet does.
func registerExternal(t *testing.T, url, name string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	def := bus.ToolDef{Name: name, Description: "A person approves a purchase order.", External: true, Permission: bus.PermissionAllow,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"po":{"type":"string"}}}`)}
	e, err := bus.NewEvent(bus.TypeRegister, "readme-test", bus.Register{Worker: "readme-test", Tools: []bus.ToolDef{def}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Msg(client.New(nc, client.Config{}).Subjects().Workers.Register(def.Name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var ack bus.RegisterAck
	if e, err := bus.Decode(resp); err != nil || e.Type != bus.TypeRegisterAck || e.DataAs(&ack) != nil || len(ack.Accepted) != 1 {
		t.Fatalf("register: %v %+v %s", err, e, resp.Data)
	}
}

// TestSecureSource: the secure router's start-up line says to `source`
// DIR/<user>.env; done as written in bash, the agent's call reaches the
// secured server even with NATS_URL pointing elsewhere before.
func TestSecureSource(t *testing.T) {
	if !strings.Contains(command(t, "go run ./cmd/router --secure DIR"), "--secure DIR") {
		t.Fatal("no secure command")
	}
	secure := filepath.Join(t.TempDir(), "secure")
	line := "go run ./cmd/router --secure " + secure + " --listen " + freePort(t) + " --data " + filepath.Join(t.TempDir(), "data")
	stdout, _ := background(t, t.TempDir(), nil, line, regexp.MustCompile(`serving prefix`))
	src := regexp.MustCompile("run `(source \\S+)/<user>\\.env` \\(bash, zsh, fish\\)").FindStringSubmatch(stdout.String())
	if src == nil {
		t.Fatalf("no source advice in the start-up lines:\n%s", stdout.String())
	}
	call := command(t, "go run ./cmd/toolbus call get_current_time")
	env := []string{"NATS_URL=nats://127.0.0.1:1"} // a wrong server, replaced by the file
	out, errOut, code := shell(t, t.TempDir(), env, src[1]+"/agent.env && "+call)
	if code != 0 || !strings.Contains(out, fmt.Sprint(time.Now().UTC().Year())) {
		t.Fatalf("%s/agent.env && call: exit %d\n%s\n%s", src[1], code, out, errOut)
	}
}

// TestSearchExample: the README's guard configuration, as written, with
// the toolworker it names: the model sees the pinned tool, reset_tools and
// search_tools only, and the README's search_tools call finds append_note
// and switches notes on.
func TestSearchExample(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)### Guard tools.*?```yaml\n(.*?)```").FindSubmatch(b)
	if block == nil {
		t.Fatal("README.md has no guard configuration block")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "router.yaml"), block[1], 0o600); err != nil {
		t.Fatal(err)
	}
	url := router(t, "--listen 127.0.0.1:-1 --config "+filepath.Join(dir, "router.yaml"))
	env := []string{"NATS_URL=" + url}
	background(t, dir, env, command(t, "go run ./cmd/toolworker --notes-group notes"), regexp.MustCompile(`serving .*append_note`))
	listed := func() []string {
		t.Helper()
		out, errOut, code := shell(t, dir, env, "go run ./cmd/toolbus tools --format openai")
		if code != 0 {
			t.Fatalf("tools: exit %d\n%s", code, errOut)
		}
		return regexp.MustCompile(`"name": "([^"]+)"`).FindAllString(out, -1)
	}
	want := `["name": "get_current_time" "name": "reset_tools" "name": "search_tools"]`
	if got := fmt.Sprint(listed()); got != want {
		t.Fatalf("listed %s, want %s", got, want)
	}
	out, errOut, code := shell(t, dir, env, command(t, "go run ./cmd/toolbus call search_tools"))
	if code != 0 || !strings.Contains(out, "tool append_note (group: notes; inactive)") || !strings.Contains(out, "The currently activated tool group(s): notes.") {
		t.Fatalf("search_tools: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := fmt.Sprint(listed()); !strings.Contains(got, `"name": "append_note"`) {
		t.Fatalf("after the search: %s", got)
	}
}
