// Package builtin holds the tools a router serves in-process unless told not
// to, and that toolworker --builtin serves (docs/protocol.md 11):
// get_current_time and echo, todo_write, and, with a base directory, the
// file tools (read_file, write_file, edit_file, list_files, search_files)
// and shell.
package builtin

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/worker"
)

// TimeIn is the input of get_current_time.
type TimeIn struct {
	Timezone string `json:"timezone,omitempty" jsonschema:"description=IANA time zone name such as UTC or Europe/Oslo; the server's zone when empty"`
}

// EchoIn is the input of echo.
type EchoIn struct {
	Text string `json:"text" jsonschema:"description=The text to send back"`
}

// Config says which built-in tools to serve; NewShell reads its WorkDir
// and Shell* fields.
type Config struct {
	// WorkDir is the base directory of the file tools and the shell; ""
	// serves neither.
	WorkDir string
	// ShellAllow limits the programs shell may start (checked on the
	// parsed command; see docs/builtin.md); empty allows any.
	ShellAllow []string
	// ShellEnv names the variables of this process's environment that
	// shell commands get besides PATH, HOME, TMPDIR, LANG and LC_ALL
	// (none by default); PATH among them passes this process's PATH
	// instead of DefaultShellPath. NATS_*, TOOLBUS_* and the variables the
	// shell sets are refused.
	ShellEnv []string
	// ShellTrust are programs shell may start with any arguments,
	// unchecked: the operator trusts them with anything (an interpreter, a
	// build tool, a program with no profile). They count as allowed.
	ShellTrust []string
	// ShellUser, when set, is the OS user shell commands run as (this
	// process must run as root, and WorkDir must be usable by that user);
	// empty: a root process runs them as DefaultShellUser unless
	// ShellAsRoot.
	ShellUser string
	// ShellAsRoot keeps a root process's commands as root without
	// ShellUser (--shell-as-root); NewShell logs a warning.
	ShellAsRoot bool
	// Skills, when set, lets shell run skills' scripts (ShellIn.Skill).
	Skills SkillFiles
	// Logger gets the shell's line about the kernel sandbox; nil discards.
	Logger *slog.Logger
	// Names is the profile of the file tools' and the shell's names:
	// NamesToolbus ("" too) or NamesAgentScope (agentscope.go).
	Names string
}

// Flags are the command-line flags of the shell and of the tools' names,
// which the router and toolworker share (RegisterFlags).
type Flags struct {
	allow, env, user, trust, names *string
	asRoot                         *bool
}

// RegisterFlags registers the shell's flags and --builtin-names on fs. prog
// names the command in their help; pre starts each help text (toolworker's
// "with --builtin: ").
func RegisterFlags(fs *flag.FlagSet, prog, pre string) *Flags {
	return &Flags{
		allow:  fs.String("shell-allow", "", pre+"comma-separated programs the built-in shell may start, checked on the parsed command (default: any; docs/builtin.md says what it is and is not)"),
		env:    fs.String("shell-env", "", pre+"comma-separated variables of the "+prog+"'s environment the shell's commands get (default: none; PATH passes the "+prog+"'s PATH; NATS_* and TOOLBUS_* are refused)"),
		user:   fs.String("shell-user", "", pre+"OS user the shell's commands run as (the "+prog+" must run as root; the workdir must be usable by that user); default: nobody when the "+prog+" runs as root"),
		trust:  fs.String("shell-trust", "", pre+"comma-separated programs the built-in shell may start with ANY arguments, unchecked: trusted with anything (interpreters, build tools, programs with no profile; docs/builtin.md)"),
		asRoot: fs.Bool("shell-as-root", false, pre+"run the shell's commands as root when the "+prog+" runs as root and --shell-user is not set (default: as nobody); logged as a warning"),
		names:  fs.String("builtin-names", NamesToolbus, pre+"names of the built-in file tools and shell: toolbus (read_file ... shell) or agentscope (Read, Write, Edit, Glob, Grep, Bash, with AgentScope's input field names)"),
	}
}

// Config returns the Config the flags give, serving workdir.
func (f *Flags) Config(workdir string, log *slog.Logger) Config {
	return Config{WorkDir: workdir, ShellAllow: cli.SplitList(*f.allow), ShellTrust: cli.SplitList(*f.trust), ShellEnv: cli.SplitList(*f.env),
		ShellUser: *f.user, ShellAsRoot: *f.asRoot, Names: *f.names, Logger: log}
}

// ShellSet reports whether any of the shell's flags was given.
func (f *Flags) ShellSet() bool {
	return *f.allow != "" || *f.trust != "" || *f.env != "" || *f.user != "" || *f.asRoot
}

// RegisterWith adds the built-in tools that cfg asks for to w.
func RegisterWith(w *worker.Worker, cfg Config) error {
	if err := checkNames(cfg.Names); err != nil {
		return err
	}
	if err := registerBasic(w); err != nil {
		return err
	}
	if cfg.WorkDir == "" {
		return nil
	}
	// The shell's settings are checked before anything is registered; the
	// file tools share its base directory.
	sh, err := NewShell(cfg)
	if err != nil {
		return err
	}
	if err := registerFiles(w, sh.files, cfg.Names); err != nil {
		return err
	}
	if cfg.Names == NamesAgentScope {
		return sh.registerAgentScope(w)
	}
	return sh.register(w)
}

func registerBasic(w *worker.Worker) error {
	return cmp.Or( // the first error
		worker.Register(w, bus.ToolDef{Name: "get_current_time",
			Description: "Get the current date and time in a time zone.", ReadOnly: true, ConcurrencySafe: true, Idempotent: true, MaxAttempts: 2, TimeoutMS: 5000},
			func(_ context.Context, _ *worker.Call, in TimeIn) (string, error) {
				loc := time.Local
				if in.Timezone != "" {
					l, err := time.LoadLocation(in.Timezone)
					if err != nil {
						return "", fmt.Errorf("unknown time zone %q", in.Timezone)
					}
					loc = l
				}
				return time.Now().In(loc).Format(time.RFC3339), nil
			}),
		worker.Register(w, bus.ToolDef{Name: "echo", Description: "Send the given text back unchanged.",
			ReadOnly: true, ConcurrencySafe: true, Idempotent: true, TimeoutMS: 5000},
			func(_ context.Context, _ *worker.Call, in EchoIn) (string, error) { return in.Text, nil }),
		registerTodo(w),
	)
}
