package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// envShellChild makes the test binary a process that runs one shell
// command (envShellChild names the directory, envShellChild_CMD the
// command, envShellChild_PROCS shellProcesses if set) and then blocks
// until stdin ends, for the tests that kill the process running a tool or
// run it as another user.
const envShellChild = "TOOLBUS_TEST_SHELL_CHILD"

// runShellChild is TestMain's hook for envShellChild; false when it is
// not set.
func runShellChild() bool {
	dir, ok := os.LookupEnv(envShellChild)
	if !ok {
		return false
	}
	cmd := os.Getenv(envShellChild + "_CMD")
	if n, err := strconv.Atoi(os.Getenv(envShellChild + "_PROCS")); err == nil {
		shellProcesses = n
	}
	s, err := NewShell(context.Background(), Config{WorkDir: dir, ShellAsRoot: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out, err := s.Run(context.Background(), "", ShellIn{Command: cmd})
	fmt.Println(out, err)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes stdin or kills us
	return true
}

// needLauncher skips a test that needs the sandbox launcher.
func needLauncher(t *testing.T, s *Shell) {
	t.Helper()
	if !s.launcher {
		t.Skip("no sandbox launcher on this OS")
	}
}

// gone says whether pid has ended (no such process, or a zombie waiting
// for a reaper that is not ours).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// waitFor polls cond every few milliseconds for at most d (testkit.CheckFor).
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.CheckFor(t, d, 5*time.Millisecond, func() error {
		if !cond() {
			return errors.New(what)
		}
		return nil
	})
}

func readPid(t *testing.T, p string) int {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

func TestShellEnvironment(t *testing.T) {
	t.Setenv("NATS_URL", "nats://secret:4222")
	t.Setenv("NATS_NKEY", "/secret/router.nk")
	t.Setenv("TOOLBUS_SECRET", "x")
	t.Setenv("PASSED", "yes")
	t.Setenv("NOT_PASSED", "no")
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir, ShellEnv: []string{"PASSED", "MISSING"}})
	out, err := s.Run(t.Context(), "", ShellIn{Command: "env | sort"})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out[strings.Index(out, "stdout:\n")+8:strings.Index(out, "\nstderr:")]), "\n")
	got := map[string]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	if got["PASSED"] != "yes" || got["HOME"] != s.Dir || got["PATH"] != DefaultShellPath || got["LANG"] != "C.UTF-8" || got["LC_ALL"] != "C.UTF-8" ||
		!strings.Contains(got["TMPDIR"], "toolbus-shell-") {
		t.Fatalf("environment:\n%s", out)
	}
	for k := range got {
		switch k {
		case "PASSED", "HOME", "PATH", "LANG", "LC_ALL", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD":
		default:
			t.Errorf("the command sees %s=%s", k, got[k])
		}
	}
	// The TMPDIR is private and gone after the call.
	if _, err := os.Stat(got["TMPDIR"]); !os.IsNotExist(err) {
		t.Errorf("TMPDIR %s still there: %v", got["TMPDIR"], err)
	}
	// Credentials cannot be named.
	for _, names := range [][]string{{"NATS_URL"}, {"nats_nkey"}, {"TOOLBUS_SECRET"}, {"HOME"}, {"GIT_CONFIG_COUNT"}, {"A-B"}, {"OTEL_EXPORTER_OTLP_HEADERS"}} {
		if _, err := NewShell(t.Context(), Config{WorkDir: dir, ShellEnv: names}); err == nil {
			t.Errorf("--shell-env %v accepted", names)
		}
	}
	// PATH named: the router's own.
	t.Setenv("PATH", "/usr/bin:/bin:/opt/x")
	s = newShell(t, Config{WorkDir: dir, ShellEnv: []string{"PATH"}})
	if out, _ := s.Run(t.Context(), "", ShellIn{Command: "echo $PATH"}); !strings.Contains(out, "stdout:\n/usr/bin:/bin:/opt/x\n") {
		t.Fatalf("PATH: %s", out)
	}
}

func TestShellBypassesDoNotRun(t *testing.T) {
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir, ShellAllow: []string{"git", "ls"}})
	if out, err := s.Run(t.Context(), "", ShellIn{Command: "git init -q ."}); err != nil || !strings.HasPrefix(out, "Exit code: 0") {
		t.Fatalf("git init: %q %v", out, err)
	}
	for _, cmd := range []string{`git -c alias.x='!touch pwned' x`, "ls () { touch pwned; }; ls"} {
		_, err := s.Run(t.Context(), "", ShellIn{Command: cmd})
		wantRefused(t, err, "shell refused: ")
	}
	// A repository config the agent wrote cannot run programs either.
	mustWrite(t, filepath.Join(dir, ".git", "config"), "[core]\n\tfsmonitor = touch pwned-fsmonitor\n\tpager = touch pwned-pager\n[alias]\n\tx = !touch pwned\n"+
		"[pager]\n\tlog = touch pwned-pager\n[remote \"o\"]\n\turl = "+dir+"\n\tuploadpack = touch pwned-uploadpack\n")
	if out, err := s.Run(t.Context(), "", ShellIn{Command: "git status; git -p log; git fetch o"}); err != nil {
		t.Fatalf("git status: %q %v", out, err)
	}
	for _, n := range []string{"pwned", "pwned-fsmonitor", "pwned-pager", "pwned-uploadpack"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s exists: a bypass ran", n)
		}
	}
}

func TestShellSetsidChildKilledAtEnd(t *testing.T) {
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir})
	needLauncher(t, s)
	for name, cmd := range map[string]string{
		"end":     "setsid sh -c 'echo $$ > pid; sleep 2; touch marker' & while [ ! -s pid ]; do sleep 0.01; done",
		"timeout": "setsid sh -c 'echo $$ > pid; sleep 60; touch marker' & while [ ! -s pid ]; do sleep 0.01; done; sleep 90",
		"double":  "(setsid sh -c 'echo $$ > pid; sleep 2; touch marker' &) ; while [ ! -s pid ]; do sleep 0.01; done",
	} {
		t.Run(name, func(t *testing.T) {
			os.Remove(filepath.Join(dir, "pid"))
			// The timeout case is cut at 8 s (at 3 s a CI run at load 18
			// timed out before the child wrote its pid); the others end in
			// well under one, but get 20 s so a loaded machine's slow start
			// does not fail them (a child left running still shows: the marker).
			timeout := 20000
			if name == "timeout" {
				timeout = 8000
			}
			_, err := s.Run(t.Context(), "", ShellIn{Command: cmd, TimeoutMS: timeout})
			if name == "timeout" {
				wantRefused(t, err, "timed out")
			} else if err != nil {
				t.Fatal(err)
			}
			pid := readPid(t, filepath.Join(dir, "pid"))
			waitFor(t, 5*time.Second, fmt.Sprintf("the setsid child %d still runs after the call", pid), func() bool { return gone(pid) })
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "marker")); err == nil {
		t.Fatal("a setsid child ran its side effect after the call")
	}
}

func TestShellChildrenDieWithTheRouter(t *testing.T) {
	dir := t.TempDir()
	if s := newShell(t, Config{WorkDir: dir}); !s.launcher {
		t.Skip("no sandbox launcher on this OS")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := "setsid sh -c 'echo $$ > pid2; exec sleep 60' & echo $$ > pid1; sleep 60"
	child := exec.Command(self, "-test.run=^$")
	child.Env = append(os.Environ(), envShellChild+"="+dir, envShellChild+"_CMD="+cmd)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the command did not start", func() bool {
		b1, _ := os.ReadFile(filepath.Join(dir, "pid1"))
		b2, _ := os.ReadFile(filepath.Join(dir, "pid2"))
		return len(b1) > 0 && len(b2) > 0
	})
	p1, p2 := readPid(t, filepath.Join(dir, "pid1")), readPid(t, filepath.Join(dir, "pid2"))
	if err := child.Process.Kill(); err != nil { // the router, SIGKILLed
		t.Fatal(err)
	}
	_ = child.Wait()
	for _, pid := range []int{p1, p2} {
		waitFor(t, 10*time.Second, fmt.Sprintf("process %d outlived the killed router", pid), func() bool { return gone(pid) })
	}
}

func TestShellLandlock(t *testing.T) {
	elsewhere := t.TempDir()
	secret := filepath.Join(elsewhere, "secret")
	mustWrite(t, secret, "the router's seed\n")
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir})
	out, err := s.Run(t.Context(), "", ShellIn{Command: "cat " + secret + "; echo x > " + filepath.Join(elsewhere, "new") +
		"; echo inside > in.txt && cat in.txt; echo tmp > $TMPDIR/t && cat $TMPDIR/t; head -c 1 /etc/passwd; ls /proc/1/ >/dev/null"})
	if err != nil {
		t.Fatal(err)
	}
	// What the command may do, sandbox or not.
	if !strings.Contains(out, "inside\ntmp\nr") {
		t.Fatalf("inside the base directory and TMPDIR:\n%s", out)
	}
	if !s.landlock {
		t.Skip("no Landlock here (no launcher, or the kernel has none): the denials are not checked")
	}
	if strings.Contains(out, "seed") || !strings.Contains(out, "stdout:\ninside\ntmp\nr") {
		t.Fatalf("sandboxed output:\n%s", out)
	}
	for _, want := range []string{"cat: " + secret + ": Permission denied", "Permission denied"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "new")); err == nil {
		t.Fatal("the sandboxed command wrote outside the base directory")
	}
}

// nobodysDir returns the user nobody and a directory it may write; the
// test is skipped unless it runs as root on a system with nobody.
func nobodysDir(t *testing.T) (*user.User, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return u, dir
}

func TestShellUser(t *testing.T) {
	if _, err := NewShell(t.Context(), Config{WorkDir: t.TempDir(), ShellUser: "no-such-user-toolbus"}); err == nil {
		t.Fatal("an unknown --shell-user accepted")
	}
	u, dir := nobodysDir(t)
	mustWrite(t, filepath.Join(dir, "root-only"), "x")
	if err := os.Chmod(filepath.Join(dir, "root-only"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newShell(t, Config{WorkDir: dir, ShellUser: "nobody"})
	out, err := s.Run(t.Context(), "", ShellIn{Command: "id -u; echo hi > mine && ls -n mine | cut -d' ' -f3; cat root-only"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "Exit code: 1\nstdout:\n"+u.Uid+"\n"+u.Uid+"\nstderr:\ncat: root-only: Permission denied") {
		t.Fatalf("as nobody:\n%s", out)
	}
}

// BenchmarkShellTrue measures what one call costs: through the launcher
// (two re-executions of the binary, Landlock) and directly.
func BenchmarkShellTrue(b *testing.B) {
	for _, launcher := range []bool{true, false} {
		b.Run(fmt.Sprintf("launcher=%v", launcher), func(b *testing.B) {
			s, err := NewShell(b.Context(), Config{WorkDir: b.TempDir(), ShellAsRoot: true})
			if err != nil {
				b.Fatal(err)
			}
			if launcher && !s.launcher {
				b.Skip("no launcher")
			}
			s.launcher = launcher
			for b.Loop() {
				if out, err := s.Run(b.Context(), "", ShellIn{Command: "true"}); err != nil || !strings.HasPrefix(out, "Exit code: 0") {
					b.Fatal(out, err)
				}
			}
		})
	}
	// With an allow-list: the interpreter and the narrower Landlock rules.
	b.Run("allow-list", func(b *testing.B) {
		s, err := NewShell(b.Context(), Config{WorkDir: b.TempDir(), ShellAsRoot: true, ShellAllow: []string{"ls"}})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if out, err := s.Run(b.Context(), "", ShellIn{Command: "ls"}); err != nil || !strings.HasPrefix(out, "Exit code: 0") {
				b.Fatal(out, err)
			}
		}
	})
}

func TestShellLogsSandbox(t *testing.T) {
	var b bytes.Buffer
	s := newShell(t, Config{WorkDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&b, nil))})
	want := "kernel sandbox active (Landlock)"
	switch {
	case !s.launcher:
		want = "no kernel sandbox and no subreaper"
	case landlockABI() == 0:
		want = "no kernel sandbox: this kernel has no Landlock"
	}
	if !strings.Contains(b.String(), want) {
		t.Fatalf("log %q, want %q", b.String(), want)
	}
}
