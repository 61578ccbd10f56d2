package builtin

import (
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
	_, dir := nobodysDir(t)
	defer func(n int) { shellProcesses = n }(shellProcesses)
	shellProcesses = 64
	s := newShell(t, Config{WorkDir: dir, ShellUser: "nobody"})
	needLauncher(t, s)
	out, err := s.Run(t.Context(), "", ShellIn{Command: slowBomb})
	if err != nil {
		t.Fatal(err)
	}
	if started := lastCount(out); started >= shellProcesses || !strings.Contains(out, "fork") {
		t.Fatalf("%d processes started (the bound is %d):\n%.500s", started, shellProcesses, out)
	}
}
