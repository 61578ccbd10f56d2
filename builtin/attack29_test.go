package builtin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// slowBomb starts 300 processes that stay, one at a time, printing the
// count after each: a fork bomb's effect without its burst.
const slowBomb = "i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); echo $i; done"

// lastCount is the last number slowBomb printed in a shell result.
func lastCount(out string) int {
	_, stdout, _ := strings.Cut(out, "stdout:\n")
	stdout, _, _ = strings.Cut(stdout, "\nstderr:")
	n := 0
	if lines := strings.Fields(stdout); len(lines) > 0 {
		n, _ = strconv.Atoi(lines[len(lines)-1])
	}
	return n
}

// TestAttackShellForkBombOwnUser (session 29): a router that is not root
// ran commands as its own user with no process bound (session 28 bounded
// only a shell user of its own), so a command's fork bomb could fill the
// machine's process table. The launcher now bounds the router's own user
// too, at shellProcesses more processes than it has when the command
// starts. Run as root (which the kernel exempts from the bound), the test
// re-executes its binary as nobody, a router that is not root; the bound
// is lowered to 64. The router answers the call, the shell's "Cannot
// fork" in it, and lives on to answer the next one.
func TestAttackShellForkBombOwnUser(t *testing.T) {
	if !sandboxSupported {
		t.Skip("no sandbox launcher on this OS")
	}
	var out string
	if os.Geteuid() != 0 {
		defer func(n int) { shellProcesses = n }(shellProcesses)
		shellProcesses = 64
		s := newShell(t, Config{WorkDir: t.TempDir()})
		needLauncher(t, s)
		var err error
		if out, err = s.Run(t.Context(), "", ShellIn{Command: slowBomb}); err != nil {
			t.Fatal(err)
		}
		if after, err := s.Run(t.Context(), "", ShellIn{Command: "echo alive"}); err != nil || !strings.Contains(after, "alive") {
			t.Fatalf("the next call: %v\n%s", err, after)
		}
	} else {
		u, dir := nobodysDir(t)
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "router.test")
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		child := exec.CommandContext(t.Context(), bin, "-test.run=^$")
		child.Env = append(os.Environ(), envShellChild+"="+dir, envShellChild+"_CMD="+slowBomb, envShellChild+"_PROCS=64", "TMPDIR="+dir)
		child.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		o, err := child.Output() // stdin is /dev/null: the child ends after its call
		if out = string(o); err != nil {
			t.Fatalf("the router (uid %d) did not live: %v\n%s", uid, err, out)
		}
	}
	if started := lastCount(out); started == 0 || started >= 150 || !strings.Contains(out, "fork") {
		t.Fatalf("%d of 300 processes started (the bound: 64 more than the user had):\n%.800s", started, out)
	}
}
