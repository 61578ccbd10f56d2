// Package builtin holds the tools a router serves in-process unless told not
// to, and that toolworker --builtin serves (docs/protocol.md 11):
// get_current_time and echo, todo_write, and, with a base directory, the
// file tools (read_file, write_file, edit_file, list_files, search_files)
// and shell.
package builtin

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
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
	// ShellTrust are programs shell may start with any arguments, unchecked:
	// the operator trusts them with anything. They count as allowed.
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
	// NamesToolbus ("" too) or NamesAgentScope (below).
	Names string
}

// Flags are the command-line flags of the shell and of the tools' names,
// which the router and toolworker share (RegisterFlags).
type Flags struct {
	allow, env, user, trust, names *string
	asRoot                         *bool
}

// RegisterFlags registers the shell's flags and --builtin-names on fs; prog
// names the command in their help, pre starts each help text.
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

// RegisterWith adds the built-in tools that cfg asks for to w; ctx bounds
// NewShell's probes.
func RegisterWith(ctx context.Context, w *worker.Worker, cfg Config) error {
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
	sh, err := NewShell(ctx, cfg)
	if err != nil {
		return err
	}
	if err := registerFiles(w, sh.files, cfg.Names); err != nil {
		return err
	}
	return sh.register(w, cfg.Names)
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
		worker.Register(w, todoDef, func(_ context.Context, c *worker.Call, in TodoIn) (string, error) {
			text, list, err := WriteTodos(c.State, in)
			if err == nil {
				err = c.PatchState(map[string]any{"todos": list})
			}
			return text, err // the text is not sent with an error
		}),
	)
}

// The profiles of the built-in tools' names (Config.Names).
const (
	// NamesToolbus: read_file, write_file, edit_file, list_files,
	// search_files and shell (the default).
	NamesToolbus = "toolbus"
	// NamesAgentScope: the same tools under AgentScope 2.x's names and
	// fields (Read, Write, Edit, Glob, Grep, Bash; docs/agentscope.md).
	NamesAgentScope = "agentscope"
)

// checkNames refuses an unknown profile.
func checkNames(n string) error {
	if n == "" || n == NamesToolbus || n == NamesAgentScope {
		return nil
	}
	return fmt.Errorf("builtin: unknown names profile %q (use %s or %s)", n, NamesToolbus, NamesAgentScope)
}

// AgentScope's inputs hold the fields of its tools the built-ins implement;
// the schemas refuse the others, so a model asking for a missing option
// (Read's pages, Grep's -A) learns it at once.

// AsBashIn is Bash's input; description is a label for people, unused.
type AsBashIn struct {
	Command     string `json:"command"`
	Description string `json:"description,omitempty"`
	Timeout     int    `json:"timeout,omitempty"`
}

const (
	asPath       = `"file_path":{"type":"string","description":"The file, absolute inside the base directory or relative to it."}`
	asReadSchema = `{"type":"object","properties":{` + asPath + `,` + offsetProp + `,` +
		`"limit":{"type":"integer","minimum":1,"maximum":2000,"description":"How many lines to read (default 2000)."}},"required":["file_path"],"additionalProperties":false}`
	asWriteSchema = `{"type":"object","properties":{` + asPath + `,` + contentProp + `},"required":["file_path","content"],"additionalProperties":false}`
	asEditSchema  = `{"type":"object","properties":{` + asPath + `,` + editProps + `},"required":["file_path","old_string","new_string"],"additionalProperties":false}`
	asGlobSchema  = `{"type":"object","properties":{"pattern":{"type":"string","description":"A glob relative to path, such as *.go or **/*.md; ** crosses directories."},` +
		`"path":{"type":"string","description":"The directory to search in (default: the base directory)."}},"required":["pattern"],"additionalProperties":false}`
	asGrepSchema = `{"type":"object","properties":{` + searchProps + `},"required":["pattern"],"additionalProperties":false}`
	asBashSchema = `{"type":"object","properties":{"command":{"type":"string","description":"The command to run."},` +
		`"description":{"type":"string","description":"What the command does, in a few words, for the people watching."},` +
		`"timeout":{"type":"integer","minimum":0,"maximum":600000,"description":"Milliseconds before the command is stopped (default 120000)."}},"required":["command"],"additionalProperties":false}`
)

// register registers the shell as shell, or as AgentScope's Bash (timeout
// in milliseconds, no skill input), as profile names.
func (s *Shell) register(w *worker.Worker, names string) error {
	if names != NamesAgentScope {
		return worker.Register(w, s.def(), func(ctx context.Context, c *worker.Call, in ShellIn) (string, error) {
			return s.Run(ctx, c.UserString(), in)
		})
	}
	d := s.def()
	d.Name, d.InputSchema = "Bash", json.RawMessage(asBashSchema)
	return worker.Register(w, d, func(ctx context.Context, c *worker.Call, in AsBashIn) (string, error) {
		return s.Run(ctx, c.UserString(), ShellIn{Command: in.Command, TimeoutMS: in.Timeout})
	})
}

// TodoItem is one entry of the input of todo_write.
type TodoItem struct {
	Content  string `json:"content"`
	Status   string `json:"status"`
	Priority string `json:"priority,omitempty"`
}

// TodoIn is the input of todo_write.
type TodoIn struct {
	Todos []TodoItem `json:"todos"`
}

// Todo is one entry of the session's list, as kept in its state.
type Todo struct {
	ID string `json:"id"`
	TodoItem
}

// Todo statuses.
const (
	TodoPending    = "pending"
	TodoInProgress = "in_progress"
	TodoCompleted  = "completed"
)

const todoSchema = `{"type":"object","properties":{"todos":{"type":"array","description":"The whole todo list, replacing the current one; an empty list clears it.",` +
	`"items":{"type":"object","properties":{` +
	`"content":{"type":"string","description":"What to do: a short imperative sentence."},` +
	`"status":{"type":"string","description":"pending, in_progress or completed; at most one item is in_progress."},` +
	`"priority":{"type":"string","description":"high, medium or low (optional)."}},` +
	`"required":["content","status"]}}},"required":["todos"]}`

var todoDef = bus.ToolDef{Name: "todo_write",
	Description: "Write the session's todo list: pass the whole list every time (it replaces the current one). Use it to plan multi-step work " +
		"and to show progress: mark one item in_progress while you work on it and completed as soon as it is done.",
	InputSchema: json.RawMessage(todoSchema), StateInjected: true, ReadOnly: false, ConcurrencySafe: false,
	Permission: bus.PermissionAllow, TimeoutMS: 10000}

// WriteTodos checks in against every rule before it changes anything and
// returns the result text and the new list (an item whose content matches
// one of the current list, in state's "todos", keeps its id).
func WriteTodos(state json.RawMessage, in TodoIn) (string, []Todo, error) {
	inProgress := 0
	for i, t := range in.Todos {
		n := i + 1
		if strings.TrimSpace(t.Content) == "" {
			return "", nil, fmt.Errorf("todo_write refused: item %d has blank content; nothing was changed", n)
		}
		if !slices.Contains([]string{TodoPending, TodoInProgress, TodoCompleted}, t.Status) {
			return "", nil, fmt.Errorf("todo_write refused: item %d has the unknown status %q (use pending, in_progress or completed); nothing was changed", n, t.Status)
		}
		if !slices.Contains([]string{"", "high", "medium", "low"}, t.Priority) {
			return "", nil, fmt.Errorf("todo_write refused: item %d has the unknown priority %q (use high, medium or low); nothing was changed", n, t.Priority)
		}
		if t.Status == TodoInProgress {
			inProgress++
		}
	}
	if inProgress > 1 {
		return "", nil, fmt.Errorf("todo_write refused: %d items are in_progress; at most one may be; nothing was changed", inProgress)
	}
	var cur struct {
		Todos []Todo `json:"todos"`
	}
	_ = json.Unmarshal(state, &cur) // none, or a corrupt list: replaced
	next := 0
	for _, t := range cur.Todos {
		if n, err := strconv.Atoi(t.ID); err == nil && n > next {
			next = n
		}
	}
	taken := map[string]bool{}
	list := make([]Todo, 0, len(in.Todos))
	for _, t := range in.Todos {
		id := ""
		if i := slices.IndexFunc(cur.Todos, func(old Todo) bool { return old.Content == t.Content && !taken[old.ID] }); i >= 0 {
			id = cur.Todos[i].ID
		}
		if id == "" { // new, or an old item without an id
			next++
			id = strconv.Itoa(next)
		}
		taken[id] = true
		list = append(list, Todo{ID: id, TodoItem: t})
	}
	return TodoText(list), list, nil
}

// TodoText is the output of todo_write for list.
func TodoText(list []Todo) string {
	if len(list) == 0 {
		return "Todo list cleared (0 items)."
	}
	open := 0
	for _, t := range list {
		if t.Status != TodoCompleted {
			open++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d open todo(s):", open)
	for _, t := range list {
		mark := cmp.Or(map[string]string{TodoInProgress: "[~]", TodoCompleted: "[x]"}[t.Status], "[ ]")
		fmt.Fprintf(&b, "\n- %s %s", mark, t.Content)
		if t.Priority != "" {
			fmt.Fprintf(&b, " (priority: %s)", t.Priority)
		}
	}
	return b.String()
}
