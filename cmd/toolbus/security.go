package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/security"
)

// runSecurity is `toolbus security config`: the roles' permissions for an
// existing deployment (docs/security.md).
func runSecurity(_ context.Context, args []string, stdout, stderr io.Writer) error {
	c, _ := lookup("security")
	fs := flag.NewFlagSet("toolbus security", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prefix := fs.String("prefix", bus.DefaultPrefix, "subject prefix of the deployment")
	var sessions, handlers listFlag
	fs.Var(&sessions, "session", "add an agent user confined to this session (repeatable)")
	fs.Var(&handlers, "handler", "add an external handler user: NAME=tool,tool (repeatable)")
	workerTools := fs.String("worker-tools", "", "confine the worker user to these comma-separated tools (default: every tool)")
	approverTools := fs.String("approver-tools", "", "confine the approver to these comma-separated tools (default: every tool)")
	agentAnswers := fs.String("agent-answers", "", "comma-separated request-scoped tools whose parked calls agents may answer (docs/security.md: any session's)")
	format := fs.String("format", "conf", "conf (a nats-server authorization block), nsc (nsc commands for a JWT deployment) or json")
	account := fs.String("account", "TOOLBUS", "with --format nsc: the account")
	out := fs.String("out", "", "generate an nkey per user into this new directory (seeds, .env files, nats-server.conf) and print the block with their public keys; without it, passwords come from the server's environment ($TOOLBUS_<USER>_PASSWORD)")
	url := fs.String("url", "", "with --out: the NATS URL written into each user's .env file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: toolbus security %s\n\n%s.\n\nflags:\n", c.args, c.summary)
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "config" {
		return usageError(fs, "security takes one subcommand, config")
	}
	spec := security.Spec{Prefix: *prefix, Sessions: sessions, WorkerTools: splitComma(*workerTools),
		ApproverTools: splitComma(*approverTools), AgentAnswers: splitComma(*agentAnswers)}
	for _, h := range handlers {
		name, tools, ok := strings.Cut(h, "=")
		if !ok || splitComma(tools) == nil {
			return usageError(fs, "--handler %q must be NAME=tool,tool", h)
		}
		spec.Handlers = append(spec.Handlers, security.Handler{Name: name, Tools: splitComma(tools)})
	}
	if *format != "conf" && *format != "nsc" && *format != "json" {
		return usageError(fs, "--format %q must be conf, nsc or json", *format)
	}
	if *out != "" {
		if *format != "conf" {
			return usageError(fs, "--out writes a nats-server configuration; it goes with --format conf")
		}
		if _, err := security.Generate(*out, *url, spec); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(*out, security.ServerConfigFile))
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		fmt.Fprintf(stderr, "toolbus: wrote the users' nkey seeds and .env files to %s; start the server with %s\n", *out, filepath.Join(*out, security.ServerConfigFile))
		return err
	}
	users, err := security.Users(spec)
	if err != nil {
		return err
	}
	switch *format {
	case "nsc":
		fmt.Fprint(stdout, security.NSC(*account, users))
	case "json":
		fmt.Fprint(stdout, security.JSON(users))
	default:
		fmt.Fprint(stdout, security.ServerConfig(*prefix, users, nil))
	}
	return nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// splitComma splits a comma-separated list, dropping empty items.
func splitComma(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
