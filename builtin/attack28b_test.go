package builtin

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestAttackShellForkBomb (session 28, second red team): a command's
// processes were bounded by nothing but the machine's (96,367 here), so
// one shell call (`:(){ :|:& };:`, in bypass mode or confirmed by someone
// who misread it) filled the process table for the call's whole timeout,
// stalling the router on the same machine. Run as another user than the
// router's, the shell user's processes are now bounded (RLIMIT_NPROC, set
// in the launcher before the switch of user); the test lowers the bound to
// 64 and starts processes one at a time rather than a real bomb.
func TestAttackShellForkBomb(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no user nobody")
	}
	defer func(n int) { shellProcesses = n }(shellProcesses)
	shellProcesses = 64
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	s := newShell(t, Config{WorkDir: dir, ShellUser: "nobody"})
	needLauncher(t, s)
	out, err := s.Run(t.Context(), "", ShellIn{Command: "i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); echo $i; done"})
	if err != nil {
		t.Fatal(err)
	}
	stdout, _, _ := strings.Cut(strings.TrimPrefix(out[strings.Index(out, "stdout:\n")+8:], ""), "\nstderr:")
	lines := strings.Fields(stdout)
	started, _ := strconv.Atoi(lines[len(lines)-1])
	if started >= shellProcesses || !strings.Contains(out, "fork") {
		t.Fatalf("%d processes started (the bound is %d):\n%.500s", started, shellProcesses, out)
	}
}
