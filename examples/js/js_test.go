// Package js holds the JavaScript examples (worker.mjs, agent.mjs,
// external.mjs); this test runs them end to end against an in-process
// nats-server and router when node and npm are installed.
package js

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/store"
)

// bound limits every wait: npm install, a process becoming ready, the agent.
const bound = 90 * time.Second

// packages are the npm packages the examples import.
var packages = []string{"@nats-io/transport-node@3.4.0"}

// setup finds node and npm (skipping the test without them), installs the
// packages into a temporary directory and copies the examples beside them.
func setup(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the JavaScript examples are not run (install node >= 18 and npm to run them)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: the JavaScript examples are not run (install node >= 18 and npm to run them)")
	}
	v, err := exec.Command(node, "--version").Output()
	if major, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(v)), "v"), "."); err != nil || atoi(major) < 18 {
		t.Skipf("node %s is older than 18: the JavaScript examples are not run", strings.TrimSpace(string(v)))
	}
	dir = t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	install := exec.CommandContext(ctx, npm, append([]string{"install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel", "error"}, packages...)...)
	install.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm install %s failed (no registry access?), the JavaScript examples are not run: %v\n%s", strings.Join(packages, " "), err, out)
	}
	for _, f := range []string{"lib.mjs", "worker.mjs", "agent.mjs", "external.mjs", "tasks.mjs"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return node, dir
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// proc is one node process whose stdout lines are JSON objects.
type proc struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	added chan struct{} // receives after every line (buffered 1)
	done  chan error    // the process's exit, once
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// start runs node script in dir with env and collects its output.
func start(t *testing.T, node, dir, script string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(node, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: script, cmd: cmd, added: make(chan struct{}, 1), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.added <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%s: %w\nstderr:\n%s", script, err, stderr.String())
		}
		p.done <- err
		close(p.added)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\nstderr:\n%s", script, p.output(), stderr.String())
		}
	})
	return p
}

// waitLine waits until a line of p matches re, within bound.
func (p *proc) waitLine(t *testing.T, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		p.mu.Lock()
		i := slices.IndexFunc(p.lines, rx.MatchString)
		var line string
		if i >= 0 {
			line = p.lines[i]
		}
		p.mu.Unlock()
		if i >= 0 {
			return line
		}
		select {
		case _, ok := <-p.added:
			if !ok {
				p.mu.Lock()
				i = slices.IndexFunc(p.lines, rx.MatchString)
				p.mu.Unlock()
				if i < 0 {
					t.Fatalf("%s ended without a line matching %s:\n%s", p.name, re, p.output())
				}
			}
		case <-timer.C:
			t.Fatalf("%s: no line matching %s within %s:\n%s", p.name, re, bound, p.output())
		}
	}
}

// wait waits for p to exit, within bound.
func (p *proc) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(bound):
		t.Fatalf("%s did not exit within %s:\n%s", p.name, bound, p.output())
	}
}

// run starts a nats-server and a router, then worker.mjs, and returns the
// environment the scripts need.
func run(t *testing.T, node, dir string) (srv *server.Server, env []string, worker *proc) {
	t.Helper()
	srv = testkit.RunServer(t)
	r, err := router.New(testkit.Connect(t, srv), router.Config{Store: store.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	env = []string{"NATS_URL=" + srv.ClientURL(), "TOOLBUS_PREFIX=toolbus"}

	worker = start(t, node, dir, "worker.mjs", append(env, "WORKER_ID=js-worker-1", "HEARTBEAT_MS=1000")...)
	var ack struct {
		Ready    string          `json:"ready"`
		Accepted []string        `json:"accepted"`
		Rejected []bus.Rejection `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(worker.waitLine(t, `"ready"`)), &ack); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ack.Accepted, []string{"js_add", "js_count", "js_brew"}) || len(ack.Rejected) != 0 {
		t.Fatalf("worker's register ack: %+v", ack)
	}
	return srv, env, worker
}

func TestExamples(t *testing.T) {
	node, dir := setup(t)
	srv, env, worker := run(t, node, dir)
	handler := start(t, node, dir, "external.mjs", env...)
	handler.waitLine(t, `"ready"`)

	agent := start(t, node, dir, "agent.mjs", append(env, "SESSION=js-e2e")...)
	agent.wait(t)
	out := agent.output()
	for _, want := range []string{
		`{"tools":["js_add","js_brew","ask_human","reset_tools"]}`,
		`{"deferred":{"js_count":"js_slow"}}`,
		`{"reset":"The currently activated tool group(s): js_slow."}`,
		`{"progress":"c2","seq":1,"text":"step 1 of 3"}`,
		`{"progress":"c2","seq":3,"text":"step 3 of 3"}`,
		`{"parked":"pick_color","kind":"external","subject":"toolbus.answer.pick_color"}`,
		`{"parked":"ask_human","kind":"external","subject":"toolbus.answer.ask_human"}`,
		`{"answered":"pick_color","accepted":true}`,
		`{"final":"js_add","state":"success","text":"2 + 3 = 5"}`,
		`{"final":"js_count","state":"success","text":"counted to 3"}`,
		`{"final":"ask_human","state":"success","text":"a person says yes to: ship it?"}`,
		`{"final":"pick_color","state":"success","text":"teal"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("agent output lacks %s", want)
		}
	}
	// The reply comes once every call is finished or parked: the parked
	// calls answered before js_count finished are results by then.
	var reply struct {
		Results []string `json:"reply_results"`
		Parked  []string `json:"reply_parked"`
	}
	if err := json.Unmarshal([]byte(agent.waitLine(t, `"reply_results"`)), &reply); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(reply.Results), reply.Parked...)
	slices.Sort(all)
	if !slices.Equal(all, []string{"ask_human", "js_add", "js_count", "pick_color"}) || !slices.Contains(reply.Results, "js_count") {
		t.Errorf("reply: results %v, parked %v", reply.Results, reply.Parked)
	}
	handler.waitLine(t, `"answered":"c3"`)
	if t.Failed() {
		t.Logf("agent output:\n%s", out)
	}

	// Stopped, the worker leaves at once: its tools are no longer listed.
	if err := worker.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	worker.waitLine(t, `"left"`)
	worker.wait(t)
	cl := client.New(testkit.Connect(t, srv), client.Config{Source: "test/examples"})
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		l, err := cl.Tools(t.Context(), "js-e2e", bus.FormatToolbus, nil)
		if err != nil {
			return err
		}
		for _, raw := range l.Tools {
			var d struct{ Name string }
			_ = json.Unmarshal(raw, &d)
			if d.Name == "js_add" {
				return errors.New("js_add is still listed after the worker left")
			}
		}
		return nil
	})
	if err := handler.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	handler.wait(t)
}

// TestTasks: background tasks (docs/protocol.md 5.10) through the
// JavaScript agent tasks.mjs, written from the protocol alone: three calls
// past their timeout come back as handles and go on; one's output is read
// while it runs; the session lists them; another session is refused them
// (get and cancel: unknown_task); a cancel ends one interrupted and stops
// its run at the worker; a wait on the other two returns both once they
// end; each end is an io.toolbus.task.done event.
func TestTasks(t *testing.T) {
	node, dir := setup(t)
	_, env, worker := run(t, node, dir)
	agent := start(t, node, dir, "tasks.mjs", append(env, "SESSION=js-tasks", "OTHER_SESSION=js-tasks-other")...)
	agent.wait(t)
	out := agent.output()
	for _, want := range []string{
		`{"handles":[["background","background",true],["background","background",true],["background","background",true]]}`,
		`{"output":"background","text":["brewing a"]}`,
		`{"listed":3}`,
		`{"other":"get","code":"unknown_task"}`,
		`{"other":"cancel","code":"unknown_task"}`,
		`{"cancelled":"interrupted","code":"interrupted"}`,
		`{"waited":[["success","a brewed"],["success","b brewed"]]}`,
		`{"ended":["success","success","interrupted"]}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("agent output lacks %s", want)
		}
	}
	worker.waitLine(t, `"stopped":"c"`)
	if t.Failed() {
		t.Logf("agent output:\n%s", out)
	}
}
