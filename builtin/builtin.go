// Package builtin holds the tools a router serves in-process unless told not
// to, and that toolworker --builtin serves (docs/protocol.md 11):
// get_current_time and echo, todo_write, and, with a base directory, the
// file tools (read_file, write_file, edit_file, list_files, search_files)
// and shell.
package builtin

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus/bus"
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

// Config says which built-in tools to serve.
type Config struct {
	// WorkDir is the base directory of the file tools and the shell; ""
	// serves neither.
	WorkDir string
	// ShellAllow limits the programs shell may start; empty allows any.
	ShellAllow []string
	// ShellEnv names the variables of this process's environment that
	// shell commands get (ShellConfig.Env); none by default.
	ShellEnv []string
	// ShellTrust are programs shell may start with any arguments
	// (ShellConfig.Trust).
	ShellTrust []string
	// ShellUser, when set, is the OS user shell commands run as; empty: a
	// root process runs them as DefaultShellUser unless ShellAsRoot.
	ShellUser string
	// ShellAsRoot keeps a root process's commands as root without
	// ShellUser (ShellConfig.AsRoot).
	ShellAsRoot bool
	// Skills, when set, lets shell run skills' scripts (ShellIn.Skill).
	Skills SkillFiles
	// Logger gets the shell's line about the kernel sandbox; nil discards.
	Logger *slog.Logger
	// Names is the profile of the file tools' and the shell's names:
	// NamesToolbus ("" too) or NamesAgentScope (agentscope.go).
	Names string
}

// RegisterWith adds the built-in tools that cfg asks for to w.
func RegisterWith(w *worker.Worker, cfg Config) error {
	if err := checkNames(cfg.Names); err != nil {
		return err
	}
	if err := registerBasic(w); err != nil {
		return err
	}
	if err := registerTodo(w); err != nil {
		return err
	}
	if cfg.WorkDir == "" {
		return nil
	}
	f, err := NewFiles(cfg.WorkDir)
	if err != nil {
		return err
	}
	// The shell's settings are checked before anything is registered.
	sh, err := NewShell(ShellConfig{Dir: f.Base(), Allow: cfg.ShellAllow, Trust: cfg.ShellTrust, Env: cfg.ShellEnv, User: cfg.ShellUser, AsRoot: cfg.ShellAsRoot, Skills: cfg.Skills, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	if cfg.Names == NamesAgentScope {
		if err := (fileTools{f}).registerAgentScope(w); err != nil {
			return err
		}
		return sh.registerAgentScope(w)
	}
	if err := (fileTools{f}).register(w); err != nil {
		return err
	}
	return sh.register(w)
}

func registerBasic(w *worker.Worker) error {
	err := worker.Register(w, bus.ToolDef{Name: "get_current_time",
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
		})
	if err != nil {
		return err
	}
	return worker.Register(w, bus.ToolDef{Name: "echo", Description: "Send the given text back unchanged.",
		ReadOnly: true, ConcurrencySafe: true, Idempotent: true, TimeoutMS: 5000},
		func(_ context.Context, _ *worker.Call, in EchoIn) (string, error) { return in.Text, nil })
}
