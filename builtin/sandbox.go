package builtin

import (
	"encoding/json"
	"sync/atomic"
)

// The sandbox launcher (docs/builtin.md, "The sandbox"). On Linux the
// shell does not start /bin/sh itself: it re-executes its own binary
// (/proc/self/exe) with argv[0] "toolbus-sandbox". That launcher is a
// child subreaper, so every process the command starts stays its
// descendant, whatever setsid or & do; it starts the command (through a
// second re-execution, "toolbus-sandbox-exec", which applies Landlock,
// drops to --shell-user and execs /bin/sh -c) and, when the command ends,
// when it is told to stop (SIGTERM) or when the router dies (the pipe on
// fd 3 reads EOF, or the parent-death signal), kills every descendant it
// has before it exits. The router itself is never restricted.

// Argv[0] markers of the two stages.
const (
	launcherArg0 = "toolbus-sandbox"
	execArg0     = "toolbus-sandbox-exec"
)

// sandboxSpec is what the router tells the launcher, as JSON in argv[1].
type sandboxSpec struct {
	Command  string   `json:"command"`
	Dir      string   `json:"dir"`            // the base directory: read, write, execute
	Tmp      string   `json:"tmp"`            // the call's TMPDIR: read, write
	Read     []string `json:"read,omitempty"` // read and execute (system directories, the skill's)
	Landlock bool     `json:"landlock"`
	// Interp runs the command with the in-process interpreter instead of
	// /bin/sh, and (with Landlock) grants the execute right only on
	// ExecFiles and ExecDirs; Names are the command names it lets run.
	Interp    bool     `json:"interp,omitempty"`
	ExecFiles []string `json:"exec_files,omitempty"`
	ExecDirs  []string `json:"exec_dirs,omitempty"`
	Names     []string `json:"names,omitempty"`
	UID       int      `json:"uid"` // -1: keep the router's
	GID       int      `json:"gid"`
	Groups    []int    `json:"groups,omitempty"`
}

func (s sandboxSpec) encode() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// hooked is set once RunSandboxChild has run in this process, which is how
// the shell knows that re-executing the binary reaches the launcher.
var hooked atomic.Bool

// RunSandboxChild must be the first thing main (and a test binary's
// TestMain) calls in a program that serves the shell tool. In the
// program's own process it only records that the hook is in place and
// returns; in a process the shell started as its sandbox launcher it runs
// the launcher and never returns. A program that does not call it still
// runs shell commands, without the launcher: no kernel sandbox and no
// subreaper (the shell logs so at start).
func RunSandboxChild() {
	runSandboxChild()
	hooked.Store(true)
}

// systemReadDirs are the directories a sandboxed command may read and
// execute from, besides the base directory and the skill's.
var systemReadDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}
