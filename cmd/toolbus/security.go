package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/security"
)

// runSecurity is `toolbus security config`: the roles' permissions for an
// existing deployment (docs/security.md).
func runSecurity(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "agent" {
		return runSecurityAgent(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "token" {
		return runSecurityToken(args[1:], stdout, stderr)
	}
	c, _ := lookup("security")
	fs := securityFlagSet("security", fmt.Sprintf("usage: toolbus security %s\n\n%s.", c.args, c.summary), stderr)
	prefix := fs.String("prefix", bus.DefaultPrefix, "subject prefix of the deployment")
	var sessions, handlers listFlag
	fs.Var(&sessions, "session", "add an agent user confined to this session (repeatable)")
	fs.Var(&handlers, "handler", "add an external handler user: NAME=tool,tool (repeatable)")
	workerTools := fs.String("worker-tools", "", "confine the worker user to these comma-separated tools (default: every tool)")
	approverTools := fs.String("approver-tools", "", "confine the approver to these comma-separated tools (default: every tool)")
	agentAnswers := fs.String("agent-answers", "", "comma-separated request-scoped tools whose parked calls agents may answer (docs/security.md: any session's)")
	facadeAnswers := fs.String("facade-answers", "", "comma-separated bridged servers' question tools (mcp__<server>__elicit) the MCP facade may answer for its hosts' users")
	format := fs.String("format", "conf", "conf (a nats-server authorization block), nsc (nsc commands for a JWT deployment) or json")
	account := fs.String("account", "TOOLBUS", "with --format nsc: the account")
	out := fs.String("out", "", "generate an nkey per user into this new directory (seeds, .env files, nats-server.conf) and print the block with their public keys; without it, passwords come from the server's environment ($TOOLBUS_<USER>_PASSWORD)")
	url := fs.String("url", "", "with --out: the NATS URL written into each user's .env file")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "config" {
		return usageError(fs, "security takes one subcommand, config or agent")
	}
	spec := security.Spec{Prefix: *prefix, Sessions: sessions, WorkerTools: cli.SplitList(*workerTools),
		ApproverTools: cli.SplitList(*approverTools), AgentAnswers: cli.SplitList(*agentAnswers),
		FacadeAnswers: cli.SplitList(*facadeAnswers)}
	for _, h := range handlers {
		name, tools, ok := strings.Cut(h, "=")
		if !ok || cli.SplitList(tools) == nil {
			return usageError(fs, "--handler %q must be NAME=tool,tool", h)
		}
		spec.Handlers = append(spec.Handlers, security.Handler{Name: name, Tools: cli.SplitList(tools)})
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

// securityFlagSet is the flag set of `toolbus name`, a security command
// without the connection flags: its usage is head, then its flags.
func securityFlagSet(name, head string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("toolbus "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), head+"\n\nflags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// runSecurityAgent is `toolbus security agent --session S [--user U]
// [--dir DIR]`: a per-session agent user made on demand in a directory of
// `router --secure` (or `toolbus security config --out`), bound to a
// toolbus user when --user is given. A router started with --secure DIR
// (or --identities DIR/users.json) picks it up without a restart.
func runSecurityAgent(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := securityFlagSet("security agent", "usage: toolbus security agent --session S [--user U] [--dir DIR]\n\n"+
		"Add the agent user session-S to DIR, confined to session S and bound to user U: its nkey seed, .env,\n"+
		"and DIR's nats-server.conf and users.json rewritten. A router started with --secure DIR picks it up\n"+
		"without a restart; the shared agent user can then neither act in nor read session S.", stderr)
	session := fs.String("session", "", "the session the agent user is confined to (required)")
	user := fs.String("user", "", "the toolbus user the session's batches run as (its per-user skills); empty binds none")
	dir := fs.String("dir", os.Getenv("TOOLBUS_SECURE"), "the --secure directory (default $TOOLBUS_SECURE)")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if err := checkID(fs, "--session", *session); err != nil {
		return err
	}
	if *dir == "" {
		return usageError(fs, "--dir (or $TOOLBUS_SECURE) names the --secure directory")
	}
	if _, err := os.Stat(filepath.Join(*dir, security.UsersFile)); err != nil {
		return fmt.Errorf("%s holds no %s: generate it first (router --secure %s, or toolbus security config --out %s)", *dir, security.UsersFile, *dir, *dir)
	}
	a, err := security.AddAgent(*dir, *session, *user)
	if err != nil {
		return err
	}
	what := "added"
	if !a.Created {
		what = "updated"
	}
	bound := "bound to no user"
	if a.User.User != "" {
		bound = fmt.Sprintf("bound to user %q", a.User.User)
	}
	fmt.Fprintf(stdout, "toolbus: %s %s (session %s, %s)\n  credentials: %s\n  environment: source %s   (bash, zsh, fish: it exports NATS_URL, NATS_NKEY, NATS_INBOX_PREFIX)\n",
		what, a.User.Name, *session, bound, a.Seed, a.Env)
	fmt.Fprintf(stdout, "  a router started with --secure %s takes it within %s, without a restart; another nats-server: reload its configuration (%s)\n",
		*dir, "2s", filepath.Join(*dir, security.ServerConfigFile))
	return nil
}

// runSecurityToken is `toolbus security token`: a new random bearer token
// for the MCP facade and its sha256: line for the token file
// (docs/mcp.md), so no plaintext token need be written on the server.
func runSecurityToken(args []string, stdout, stderr io.Writer) error {
	fs := securityFlagSet("security token", "usage: toolbus security token [--name N] [--user U]\n\n"+
		"Print a new random bearer token for the MCP facade, and the token file entry that holds only its\n"+
		"SHA-256 (router --mcp-tokens FILE; docs/mcp.md). Give the token to the MCP host as\n"+
		"\"Authorization: Bearer <token>\"; it is shown once.", stderr)
	name := fs.String("name", "host", "the entry's name in the token file (for logs)")
	user := fs.String("user", "", "the toolbus user the entry's calls run as (empty: none)")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if err := checkID(fs, "--name", *name); err != nil {
		return err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	token := "tbt_" + base64.RawURLEncoding.EncodeToString(b)
	fmt.Fprintf(stdout, "token: %s\n", token)
	fmt.Fprintf(stdout, "%s\n", facade.HashToken(token))
	fmt.Fprintf(stdout, "\n# an entry of the token file (router --mcp-tokens FILE):\ntokens:\n  - name: %s\n    token: %s\n", *name, facade.HashToken(token))
	if *user != "" {
		fmt.Fprintf(stdout, "    user: %s\n", strconv.Quote(*user))
	}
	fmt.Fprintf(stdout, "    sessions: [\"*\"]\n")
	return nil
}
