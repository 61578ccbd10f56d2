//go:build linux

package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

func runSandboxChild() {
	switch os.Args[0] {
	case launcherArg0:
		os.Exit(launch())
	case execArg0:
		os.Exit(execStage())
	}
}

// landlockABI is the kernel's Landlock ABI version, 0 without Landlock.
func landlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

func decodeSpec() (sandboxSpec, error) {
	var spec sandboxSpec
	if len(os.Args) < 2 {
		return spec, errors.New("no specification")
	}
	err := json.Unmarshal([]byte(os.Args[1]), &spec)
	return spec, err
}

// launch is the launcher: a subreaper that starts the command and kills all
// its descendants when it ends, on a stop, or when the router goes away.
func launch() int {
	if _, err := decodeSpec(); err != nil {
		return cannotRun("%v", err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return cannotRun("subreaper: %v", err)
	}
	// fd 3 is the read end of a pipe whose write end only the router
	// holds: EOF means the router is gone. The command does not get it.
	syscall.CloseOnExec(3)
	stop := make(chan os.Signal, 4)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		_, _ = io.Copy(io.Discard, os.NewFile(3, "router"))
		stop <- syscall.SIGTERM
	}()
	p, err := os.StartProcess("/proc/self/exe", []string{execArg0, os.Args[1]},
		&os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		return cannotRun("start: %v", err)
	}
	self := os.Getpid()
	done := make(chan struct{})
	stopped := make(chan os.Signal, 1)
	go func() {
		select {
		case sig := <-stop:
			stopped <- sig
			// Kill until the reaper below has seen the command end; it
			// reaps, this goroutine only signals.
			for {
				killDescendants(self)
				select {
				case <-done:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		case <-done:
		}
	}()
	// Reap children until the command is among them (Wait4 fills status
	// on every return: the command's, or zero on an error).
	var status syscall.WaitStatus
	for {
		pid, err := syscall.Wait4(-1, &status, 0, nil)
		if err != nil && !errors.Is(err, syscall.EINTR) || pid == p.Pid {
			break
		}
	}
	reapAll(self)
	close(done)
	select {
	case sig := <-stopped:
		return dieOf(sig.(syscall.Signal))
	default:
	}
	if status.Signaled() {
		return dieOf(status.Signal())
	}
	return status.ExitStatus()
}

// cannotRun reports why the command could not run and returns 126 (the
// shell's status for a command that cannot run).
func cannotRun(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "toolbus-sandbox: "+format+"\n", args...)
	return 126
}

// dieOf ends the launcher by sig, so that the router sees what ended the
// command; 128+sig if that fails.
func dieOf(sig syscall.Signal) int {
	signal.Reset(sig)
	_ = syscall.Kill(os.Getpid(), sig)
	time.Sleep(100 * time.Millisecond) // the signal is on its way
	return 128 + int(sig)
}

// reapAll kills every descendant of self and reaps its children until it
// has none left (and so no descendants), for at most 10 seconds.
func reapAll(self int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		killDescendants(self)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.ECHILD) {
				return
			}
			if err != nil && !errors.Is(err, syscall.EINTR) || pid == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killDescendants sends SIGKILL to every process whose chain of parents
// (read from /proc) leads to self.
func killDescendants(self int) {
	children := map[int][]int{}
	eachPid(func(pid int) {
		if pp, ok := parentOf(pid); ok {
			children[pp] = append(children[pp], pid)
		}
	})
	for queue := []int{self}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			_ = syscall.Kill(c, syscall.SIGKILL)
			queue = append(queue, c)
		}
	}
}

// eachPid calls f with each process id in /proc.
func eachPid(f func(pid int)) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			f(pid)
		}
	}
}

// parentOf reads the parent pid from /proc/<pid>/stat (the field after
// the state, which follows the last ')' of the command name).
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(string(f[1]))
	return pp, err == nil
}

// execStage applies Landlock, drops to the shell user and becomes
// /bin/sh -c; it returns only on failure.
func execStage() int {
	spec, err := decodeSpec()
	if err != nil {
		return cannotRun("%v", err)
	}
	// Before Landlock, which takes /proc away. The command and all it
	// starts are the kernel's first choice when memory runs out (raising
	// one's own score needs no privilege; best effort, as Landlock): a
	// command growing past its bound in many processes is killed, not the
	// router beside it.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	if err := boundProcs(spec); err != nil {
		return cannotRun("%v", err)
	}
	if m := spec.Memory; m > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: m, Max: m}); err != nil {
			return cannotRun("setrlimit data: %v", err)
		}
	}
	if spec.Landlock {
		if err := restrict(spec); err != nil {
			return cannotRun("landlock: %v", err)
		}
	}
	if spec.UID >= 0 {
		if err := dropTo(spec); err != nil {
			return cannotRun("%v", err)
		}
	}
	// Dies with the launcher (set after the switch of user, which clears it).
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
	if spec.Interp {
		return interpret(spec)
	}
	err = syscall.Exec("/bin/sh", []string{"sh", "-c", spec.Command}, os.Environ())
	return cannotRun("exec /bin/sh: %v", err)
}

// restrict applies Landlock to this process and what it starts: read and
// execute under the system directories and spec.Read, read and write under
// the base directory and the call's TMPDIR, the usual character devices;
// signals and abstract sockets only within the sandbox. Best effort: a
// kernel without (some of) Landlock gets what it has.
func restrict(spec sandboxSpec) error {
	cfg := landlock.Config{HandledAccessFS: landlock.V11.HandledAccessFS, Scoped: landlock.V11.Scoped}.BestEffort()
	read := append(append([]string{}, systemReadDirs...), spec.Read...)
	devices := []landlock.Rule{
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full").IgnoreIfMissing(),
		landlock.ROFiles("/dev/urandom", "/dev/random").IgnoreIfMissing(),
	}
	if spec.Interp {
		return cfg.Restrict(append(devices, execOnlyRules(spec, read)...)...)
	}
	return cfg.Restrict(append(devices, landlock.RODirs(read...).IgnoreIfMissing(), landlock.RWDirs(spec.Dir, spec.Tmp).WithRefer())...)
}

// routerReserve is how many processes (threads) below its own bound the
// router's user keeps when a command runs as that user: room for the
// router's threads while a command's processes fill their bound (Go's
// runtime dies when it cannot start a thread).
const routerReserve = 256

// boundProcs sets RLIMIT_NPROC, which the kernel checks at each fork
// against every process and thread of the real user (except for root and
// holders of CAP_SYS_RESOURCE or CAP_SYS_ADMIN). A shell user of its own
// gets spec.Procs. The router's own user already has processes, the
// router's threads among them: it gets spec.Procs more than it has now, at
// most the router's own bound less routerReserve. Procs 0: no bound.
func boundProcs(spec sandboxSpec) error {
	n := uint64(spec.Procs)
	if n == 0 {
		return nil
	}
	if spec.UID < 0 {
		var cur unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NPROC, &cur); err != nil {
			return fmt.Errorf("getrlimit nproc: %w", err)
		}
		n += userTasks(os.Getuid())
		if cur.Cur != unix.RLIM_INFINITY {
			n = min(n, cur.Cur-min(cur.Cur, routerReserve))
		}
	}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		return fmt.Errorf("setrlimit nproc: %w", err)
	}
	return nil
}

// userTasks counts the processes and threads in /proc whose real user is
// uid (status lines "Uid:\t<real>\t..." and "Threads:\t<n>").
func userTasks(uid int) (n uint64) {
	eachPid(func(pid int) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		_, u, _ := strings.Cut(string(b), "\nUid:\t")
		_, th, _ := strings.Cut(string(b), "\nThreads:\t")
		th, _, _ = strings.Cut(th, "\n")
		if t, err := strconv.ParseUint(th, 10, 64); err == nil && strings.HasPrefix(u, strconv.Itoa(uid)+"\t") {
			n += t
		}
	})
	return n
}

// dropTo switches to spec's user and groups, for good.
func dropTo(spec sandboxSpec) error {
	groups := spec.Groups
	if len(groups) == 0 {
		groups = []int{spec.GID}
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(spec.GID); err != nil {
		return fmt.Errorf("setgid %d: %w", spec.GID, err)
	}
	if err := syscall.Setuid(spec.UID); err != nil {
		return fmt.Errorf("setuid %d: %w", spec.UID, err)
	}
	return nil
}

// Rights without execute: reading, and in the base directory and TMPDIR
// writing.
const (
	readNoExec  = llsys.AccessFSReadFile | llsys.AccessFSReadDir
	writeNoExec = readNoExec | llsys.AccessFSWriteFile | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile |
		llsys.AccessFSMakeDir | llsys.AccessFSMakeReg | llsys.AccessFSMakeSym | llsys.AccessFSMakeFifo |
		llsys.AccessFSMakeSock | llsys.AccessFSTruncate | llsys.AccessFSRefer
)

// execOnlyRules are restrict's rules for an allow-listed command: the same
// reads and writes, but the execute right only on the listed programs,
// their interpreters and git's exec-path; nothing under the base
// directory, TMPDIR or the system directories is executable otherwise.
func execOnlyRules(spec sandboxSpec, read []string) []landlock.Rule {
	rules := []landlock.Rule{
		landlock.PathAccess(readNoExec, read...).IgnoreIfMissing(),
		landlock.PathAccess(writeNoExec, spec.Dir, spec.Tmp),
	}
	if len(spec.ExecFiles) > 0 {
		rules = append(rules, landlock.PathAccess(llsys.AccessFSExecute|llsys.AccessFSReadFile, spec.ExecFiles...).IgnoreIfMissing())
	}
	if len(spec.ExecDirs) > 0 {
		rules = append(rules, landlock.PathAccess(llsys.AccessFSExecute|readNoExec, spec.ExecDirs...).IgnoreIfMissing())
	}
	return rules
}

// sandboxSupported: the launcher exists on this OS.
const sandboxSupported = true

// launcherCommand returns the command that starts spec through the
// sandbox launcher, and what to do once it has ended: close the pipe that
// tells the launcher the router is alive, and kill what is left of its
// process group (should the launcher itself have been killed).
func launcherCommand(ctx context.Context, spec sandboxSpec) (*exec.Cmd, func()) {
	arg, _ := json.Marshal(spec)
	cmd := exec.CommandContext(ctx, "/proc/self/exe", string(arg))
	cmd.Args[0] = launcherArg0
	pr, pw, err := os.Pipe()
	if err == nil {
		cmd.ExtraFiles = []*os.File{pr}
	}
	// Pdeathsig: a router that dies tells the launcher, which then kills
	// the command's processes (the pipe's EOF says the same).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// A cancel or timeout asks the launcher to stop; it kills every
	// descendant and exits; WaitDelay kills it if it does not.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	return cmd, func() {
		if err == nil {
			pr.Close()
			pw.Close()
		}
		killGroup(cmd)
	}
}

// runLocked runs cmd on a locked OS thread: the parent-death signal fires
// when the thread that started the child ends, so that thread must live
// until the child has.
func runLocked(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Run()
}
