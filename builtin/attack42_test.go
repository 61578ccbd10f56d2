//go:build linux

package builtin

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAttack42ShellMemory (session 42, red team): a command that grows
// its memory without end, stopped only by its timeout (up to 10 minutes):
// `sed -n p /dev/zero` with an allow-listed sed reads one line that never
// ends, 280 MB a second here, a whole machine's memory in a minute or two.
// The process bound limits processes, not bytes, so the kernel's OOM
// killer decided, weighing the router beside the command, once the
// machine was already short. Each process of a command now has a data
// bound (RLIMIT_DATA, 4 GiB; 1 GiB here) and oom_score_adj 1000, which
// all it starts inherit: it fails at its bound, and many at once are the
// kernel's first choice, never the router.
func TestAttack42ShellMemory(t *testing.T) {
	defer func(n uint64) { shellMemory = n }(shellMemory)
	shellMemory = 1 << 30
	for name, cfg := range map[string]Config{"sh": {}, "interpreter": {ShellAllow: []string{"echo", "sleep", "sed"}}} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg.WorkDir = dir
			s := newShell(t, cfg)
			needLauncher(t, s)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				// The interpreter's pid is the exec stage's, which $$ names
				// there as sh's does.
				_, err := s.Run(ctx, "", ShellIn{Command: "echo $$ > pid; sleep 60", TimeoutMS: 30000})
				done <- err
			}()
			p := filepath.Join(dir, "pid")
			waitFor(t, 20*time.Second, "the command wrote no pid", func() bool {
				b, err := os.ReadFile(p)
				return err == nil && strings.HasSuffix(string(b), "\n")
			})
			proc := "/proc/" + strconv.Itoa(readPid(t, p)) + "/"
			adj, err1 := os.ReadFile(proc + "oom_score_adj")
			limits, err2 := os.ReadFile(proc + "limits")
			cancel()
			<-done
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if got := strings.TrimSpace(string(adj)); got != "1000" {
				t.Fatalf("the command has oom_score_adj %s: the OOM killer may take the router first", got)
			}
			if !strings.Contains(string(limits), "Max data size             1073741824           1073741824") {
				t.Fatalf("the command's data is not bounded:\n%s", limits)
			}
			// Only now that the bound is known to be there: the runaway
			// ends at it, well before its timeout (GNU sed 4.9 reads the
			// failed allocation as the end of its input: exit 0).
			if _, err := s.Run(t.Context(), "", ShellIn{Command: "sed -n p /dev/zero", TimeoutMS: 60000}); err != nil {
				t.Fatalf("sed -n p /dev/zero: %v", err)
			}
		})
	}
}

// TestAttack42InterpreterBuiltinsHeld (session 42, red team: held): with
// an allow-list, the interpreter's own builtins that run or read what the
// list cannot check are refused before anything runs (cd, exec, source
// and ., builtin, command, trap, read, a here-string, process
// substitution), and a redirection names no socket (/dev/tcp is a file
// path to mvdan.cc/sh: none) nor a write through a magic link.
func TestAttack42InterpreterBuiltinsHeld(t *testing.T) {
	s := newShell(t, Config{ShellAllow: []string{"ls", "cat", "echo"}})
	needLauncher(t, s)
	for _, c := range []string{"cd / && ls root", "exec id", "source /etc/profile", ". /etc/profile", "builtin id",
		"command -p id", "trap id EXIT; ls", "read x < /etc/hostname; echo $x", "cat <(id)", "cat > x <<< hi"} {
		if out, err := s.Run(t.Context(), "", ShellIn{Command: c}); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%q ran: %v\n%.300s", c, err, out)
		}
	}
	for _, c := range []string{"cat < /dev/tcp/127.0.0.1/4222", "echo hi >/proc/self/fd/1"} {
		if out, err := s.Run(t.Context(), "", ShellIn{Command: c}); err != nil || !strings.HasPrefix(out, "Exit code: 1\n") {
			t.Errorf("%q: %v\n%.300s", c, err, out)
		}
	}
}
