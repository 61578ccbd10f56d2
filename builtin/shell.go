package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/worker"
)

// Shell limits (PROTOCOL.md 11).
const (
	DefaultShellTimeout = 120 * time.Second
	MaxShellTimeout     = 600 * time.Second
	// MaxStreamChars is where each of stdout and stderr is cut.
	MaxStreamChars = 30000
)

// SkillFiles puts a skill's files on disk for the shell tool: Acquire
// returns the directory that holds them and a release to call once the
// command has ended (the directory stays until then, even when a newer
// version of the skill arrives).
type SkillFiles interface {
	Acquire(ctx context.Context, name, user string) (dir string, release func(), err error)
}

// ShellIn is the input of shell.
type ShellIn struct {
	Command   string `json:"command"`
	TimeoutMS int    `json:"timeout_ms,omitempty"`
	Skill     string `json:"skill,omitempty"`
}

// Shell runs commands in a base directory.
type Shell struct {
	Dir    string     // the base directory
	Allow  []string   // programs it may start; empty means any
	Skills SkillFiles // nil: no skill scripts
}

const shellSchemaBase = `{"type":"object","properties":{"command":{"type":"string","description":"The command, run by /bin/sh -c in the base directory."},` +
	`"timeout_ms":{"type":"integer","minimum":1,"maximum":600000,"description":"How long the command may run, in milliseconds (default 120000, at most 600000)."}`

func (s *Shell) def() bus.ToolDef {
	schema := shellSchemaBase
	desc := "Run a shell command in the base directory " + s.Dir + " and return its exit code, stdout and stderr (each cut after 30000 characters)."
	if len(s.Allow) > 0 {
		desc += " Only these programs may be started: " + strings.Join(s.Allow, ", ") + "."
	}
	if s.Skills != nil {
		schema += `,"skill":{"type":"string","description":"The name of a skill whose scripts the command runs: its files are put in a folder, $SKILL_DIR names it, and the output says where it is."}`
		desc += " To run a skill's script, set skill to the skill's name and refer to its files through $SKILL_DIR, e.g. \"sh $SKILL_DIR/scripts/run.sh\"."
	}
	return bus.ToolDef{Name: "shell", Description: desc, InputSchema: json.RawMessage(schema + `},"required":["command"]}`),
		ReadOnly: false, ConcurrencySafe: false, RuleMatcher: bus.MatcherCommand, RuleField: "command",
		TimeoutMS: int64((MaxShellTimeout + 10*time.Second) / time.Millisecond)}
}

// checkAllowed refuses a command that starts a program outside the allow-list.
func (s *Shell) checkAllowed(cmd string) error {
	if len(s.Allow) == 0 {
		return nil
	}
	parts, ok := permission.SplitCommand(cmd)
	if !ok {
		return refused("shell refused: with an allow-list the command may not use command substitution, process substitution or unbalanced quotes")
	}
	for _, p := range parts {
		prog := program(p)
		if prog == "" {
			continue
		}
		if !slices.Contains(s.Allow, prog) {
			return refused("shell refused: the program %q is not allowed; allowed programs: %s", prog, strings.Join(s.Allow, ", "))
		}
	}
	return nil
}

// program returns the program a simple command starts: its first word
// after grouping characters and variable assignments, without its
// directory and quotes.
func program(simple string) string {
	for _, w := range strings.Fields(simple) {
		w = strings.TrimLeft(w, "({!")
		w = strings.Trim(w, `'"`)
		if w == "" || strings.Contains(w, "=") && !strings.HasPrefix(w, "=") {
			continue
		}
		if w == "}" || w == ")" {
			return ""
		}
		return filepath.Base(w)
	}
	return ""
}

// Run runs the command; user is the batch's user (for user-scoped skills).
// A timeout is a refusal whose text holds the output so far.
func (s *Shell) Run(ctx context.Context, user string, in ShellIn) (string, error) {
	if strings.TrimSpace(in.Command) == "" {
		return "", refused("shell refused: the command is empty")
	}
	timeout := DefaultShellTimeout
	if in.TimeoutMS > 0 {
		timeout = time.Duration(in.TimeoutMS) * time.Millisecond
	}
	if timeout > MaxShellTimeout {
		return "", refused("shell refused: timeout_ms %d is more than 600000", in.TimeoutMS)
	}
	if err := s.checkAllowed(in.Command); err != nil {
		return "", err
	}
	env := os.Environ()
	var note string
	if in.Skill != "" {
		if s.Skills == nil {
			return "", refused("shell refused: this worker runs no skill scripts")
		}
		dir, release, err := s.Skills.Acquire(ctx, in.Skill, user)
		if err != nil {
			return "", refused("shell refused: skill %q: %v", in.Skill, err)
		}
		defer release()
		env = append(env, "SKILL_DIR="+dir)
		note = fmt.Sprintf("Skill %s's files are in %s ($SKILL_DIR).\n", in.Skill, dir)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, "/bin/sh", "-c", in.Command)
	cmd.Dir, cmd.Env = s.Dir, env
	stdout, stderr := &capped{max: MaxStreamChars}, &capped{max: MaxStreamChars}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Stdin = nil
	setGroup(cmd)
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	out := note + render(cmd, stdout, stderr)
	var ee *exec.ExitError
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return "", refused("shell: the command timed out after %v and was stopped; output so far:\n%s", timeout, out)
	case ctx.Err() != nil:
		return "", ctx.Err()
	case err == nil, errors.As(err, &ee):
		return out, nil
	default:
		return "", refused("shell: the command could not run: %v", err)
	}
}

func render(cmd *exec.Cmd, stdout, stderr *capped) string {
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	return fmt.Sprintf("Exit code: %d\nstdout:\n%s\nstderr:\n%s", code, stdout.text(), stderr.text())
}

// capped keeps the first max characters written to it and counts the rest.
type capped struct {
	max     int
	mu      sync.Mutex
	buf     bytes.Buffer
	chars   int
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := utf8.RuneCount(p)
	if room := c.max - c.chars; room > 0 {
		if n <= room {
			c.buf.Write(p)
			c.chars += n
			return len(p), nil
		}
		// Keep room characters (a rune split across writes counts once
		// per part; close enough for a cut).
		i, k := 0, 0
		for k < room && i < len(p) {
			_, size := utf8.DecodeRune(p[i:])
			i += size
			k++
		}
		c.buf.Write(p[:i])
		c.chars += k
		c.dropped += n - k
		return len(p), nil
	}
	c.dropped += n
	return len(p), nil
}

func (c *capped) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimRight(c.buf.String(), "\n")
	if c.dropped > 0 {
		s += fmt.Sprintf("\n[output cut after %d characters; %d more not shown]", c.max, c.dropped)
	}
	return s
}

func (s *Shell) register(w *worker.Worker) error {
	return worker.Register(w, s.def(), func(ctx context.Context, c *worker.Call, in ShellIn) (string, error) {
		return s.Run(ctx, c.UserString(), in)
	})
}
