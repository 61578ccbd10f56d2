// Command toolbus is the command line for people: call tools, list what a
// session's model sees, watch events, cancel calls, switch groups and
// permission modes, see and answer parked calls, and more (`toolbus help`).
//
//	toolbus call get_current_time '{"timezone":"UTC"}'
//	toolbus parked --all
//	toolbus answer <call-id> 'approved'
package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/natsconn"
)

func main() {
	cli.Main("toolbus", run)
}

// command is one subcommand.
type command struct {
	name    string
	args    string // synopsis of the positional arguments
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{"call", "<tool> ['<json input>']", "call one tool and print its result", runCall},
		{"turn", "[--format openai|openai-responses|anthropic|gemini] [--wait] < assistant.json", "run the tool calls of a model's assistant message and print the tool-result messages its API expects", runTurn},
		{"tools", "", "list the tools and groups a session's model sees", runTools},
		{"watch", "", "print a session's events as they happen", runWatch},
		{"cancel", "<reply-id> [call-id...]", "interrupt the running and parked calls of a reply (a parked reply's id finds its session; a running one is looked for in --session)", runCancel},
		{"groups", "[put FILE | rm NAME]", "list a session's tool groups, active ones marked [x]; put stores a group definition (YAML or JSON), rm removes one", runGroups},
		{"reset", "[group...]", "activate exactly these meta groups with reset_tools (none given: all off)", runReset},
		{"session", "show | mode <mode>", "show a session's groups, mode and rules, or set its permission mode", runSession},
		{"activate", "<group...>", "activate (or with --off deactivate) external-scope groups for a session", runActivate},
		{"parked", "[call-id]", "list the calls parked for an answer or a confirmation (a call id: that call, in whatever session, and the command that answers it)", runParked},
		{"answer", "<call-id> '<json blocks or text>'", "answer a parked external call with its output (the call id finds its session; --session only if it is ambiguous)", runAnswer},
		{"confirm", "<call-id>", "allow (or with --deny refuse) a call parked for a confirmation (the call id finds its session; --session only if it is ambiguous)", runConfirm},
		{"inbox", "[--listen 127.0.0.1:8080]", "serve the approval inbox: a page listing what waits across sessions, to allow, deny or answer (docs/inbox.md)", runInbox},
		{"watch-handoff", "<tool|*>", "print the requests waiting for a tool's handlers (or approvers), oldest first", runWatchHandoff},
		{"skills", "ls | show <name> | push DIR | rm <name>", "list, show, push (--user U) or remove (--user U) the skills on the bus", runSkills},
		{"fetch", "<nats-object://bucket/name#sha256=...>", "print (or with -o FILE save) a stored output, read through the routers (--direct: from the object store)", runFetch},
		{"status", "", "show routers, workers per tool, sessions and parked calls", runStatus},
		{"limits", "[--tool T] [--user U] [--reset [--rule R]]", "show what the quotas and rate limits have used and left for a tool, user and session, or reset them", runLimits},
		{"audit", "[--since 1h] [--session S] [--tool T] [--user U] [--json]", "export the audit trail of tool calls as JSON lines (docs/operations.md)", runAudit},
		{"mcp", "", "serve the session as an MCP server over stdio (--user U), for a desktop MCP host", runMCP},
		{"security", "config [--prefix P] [--session S ...] [--handler NAME=tool,tool ...] [--worker NAME=tool,tool ...] [--format conf|nsc|json] [--out DIR] | agent --session S [--user U] [--dir DIR] | refresh [--dir DIR] | token [--name N] [--user U]", "print the NATS permissions of the toolbus roles for a deployment, add a per-session agent user, bring a generated directory up to date (docs/security.md), or make an MCP bearer token and its sha256: line (docs/mcp.md)", runSecurity},
		{"bench", "", "measure toolbus against raw NATS request/reply, each part in a process of its own (--quick, --json)", harness("bench")},
		{"soak", "", "run 2 routers and 3 workers under load with faults and count lost and duplicated calls (--duration, --json)", harness("soak")},
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return flag.ErrHelp
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return flag.ErrHelp
		}
		c, ok := lookup(rest[0])
		if !ok {
			usage(stderr)
			return fmt.Errorf("no help topic %q: it is not a command", rest[0])
		}
		return c.run(ctx, []string{"-h"}, stdout, stdout)
	}
	c, ok := lookup(name)
	if !ok {
		usage(stderr)
		return fmt.Errorf("unknown command %q", name)
	}
	if cli.WantsHelp(rest) {
		stderr = stdout // the usage the flag set prints is the help asked for
	}
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	st := &runState{abort: abort}
	err := c.run(context.WithValue(ctx, runKey{}, st), rest, stdout, stderr)
	for _, nc := range st.conns {
		nc.Close()
	}
	if refused, ok := errors.AsType[*refusedError](context.Cause(ctx)); ok && err != nil {
		return refused // the refusal, not the cancelled wait it caused
	}
	return err
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: toolbus <command> [arguments] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-13s %s\n", "help", "show this text, or 'toolbus help <command>' for a command's flags")
	fmt.Fprint(w, `
Every command takes --nats (default $NATS_URL, else nats://127.0.0.1:4222), --prefix and --session (default "cli"),
and the credentials the nats CLI takes, from the same environment variables: --creds, --nkey,
--nats-user/--password ($NATS_USER, $NATS_PASSWORD), --token, --tls-ca, --tls-cert, --tls-key, --inbox-prefix
(docs/security.md). --user is always the toolbus user (the batch's runtime user), never the NATS login: the
commands that have one use it, audit filters by it, and the others refuse it.

exit status: 0 done (every call succeeded), 1 an error or a call that did not succeed, 3 nothing failed but
calls are still parked (call and turn without --wait: the commands that answer them are printed), 130 a second interrupt.
`)
}

// conn holds the flags every subcommand shares and connects with them.
type conn struct {
	nats    natsconn.Config
	prefix  string
	session string
	// anySession: the command takes --session "*" (allSessions) for
	// every session.
	anySession bool
}

// defaultSession is the session of the command line unless --session says.
const defaultSession = "cli"

// newFlagSet returns the flag set of subcommand name with the shared flags.
func newFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *conn) {
	c, _ := lookup(name)
	fs := flag.NewFlagSet("toolbus "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cn := &conn{nats: natsconn.FromEnv()}
	cn.nats.RegisterFlags(fs, "user") // --user is the toolbus user; the NATS one is --nats-user
	fs.StringVar(&cn.prefix, "prefix", bus.DefaultPrefix, "subject prefix of the deployment")
	common := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { common[f.Name] = true })
	fs.StringVar(&cn.session, "session", defaultSession, "session id")
	fs.Usage = cli.GroupedUsage(fs, fmt.Sprintf("usage: toolbus %s %s [flags]\n\n%s.\n", c.name, c.args, c.summary),
		common, "connection flags (as the nats CLI's, from the same environment variables; docs/security.md):")
	return fs, cn
}

// dial connects to NATS and returns a client of the deployment.
func (cn *conn) dial(ctx context.Context) (*client.Client, error) {
	nc, err := cn.connect(ctx)
	if err != nil {
		return nil, err
	}
	return client.New(nc, client.Config{Prefix: cn.prefix, Source: "toolbus/cli"}), nil
}

// connect connects to NATS with the shared flags; run closes it. A
// permissions violation the server reports ends the command at once.
func (cn *conn) connect(ctx context.Context) (*nats.Conn, error) {
	st, _ := ctx.Value(runKey{}).(*runState)
	nc, err := cn.nats.Connect("toolbus-cli", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if st != nil && (errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation")) {
			st.abort(&refusedError{err: err})
		}
	}))
	if errors.Is(err, nats.ErrNoServers) {
		err = fmt.Errorf("%w (is a router running? start one with `go run ./cmd/router`, or name the deployment with --nats or $NATS_URL)", err)
	}
	if err == nil && st != nil {
		st.conns = append(st.conns, nc)
	}
	return nc, err
}

// runKey holds the *runState of the command run runs.
type runKey struct{}

// runState is a running command's abort, which a refusal calls, and the
// connections it opened, which run closes when it returns.
type runState struct {
	abort context.CancelCauseFunc
	conns []*nats.Conn
}

// refusedError is a permissions violation that ended a command.
type refusedError struct{ err error }

func (e *refusedError) Error() string {
	return fmt.Sprintf("%v: these credentials' role may not do this (docs/security.md, Roles; log in as the role the command needs, e.g. the operator for admin verbs, the approver for confirm)", e.err)
}

func (e *refusedError) Unwrap() error { return e.err }

// open checks --session (which may be allSessions when the command takes
// it) and connects: the start of most subcommands.
func (cn *conn) open(ctx context.Context, fs *flag.FlagSet) (*client.Client, error) {
	if !cn.anySession || cn.session != allSessions {
		if err := checkID(fs, "--session", cn.session); err != nil {
			return nil, err
		}
	}
	return cn.dial(ctx)
}

// sessionIf is --session, checked, when in says the command looks in it;
// else "" (every session).
func (cn *conn) sessionIf(fs *flag.FlagSet, in bool) (string, error) {
	if !in {
		return "", nil
	}
	return cn.session, checkID(fs, "--session", cn.session)
}

// parseNone is parse for a command that takes no positional arguments.
func parseNone(fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args)
	if err == nil && len(pos) > 0 {
		err = usageError(fs, "%s takes no arguments, got %q", strings.TrimPrefix(fs.Name(), "toolbus "), pos[0])
	}
	return err
}

// replyID checks --session and returns the batch's reply id: id
// (--reply-id's), checked, or a fresh one when it is empty.
func (cn *conn) replyID(fs *flag.FlagSet, id string) (string, error) {
	if err := checkID(fs, "--session", cn.session); err != nil || id == "" {
		return client.NewReplyID(), err
	}
	return id, checkID(fs, "--reply-id", id)
}

// parseList is parse for a command that takes one or more positional
// arguments, each valid: need is the error without any, bad (with the
// argument) the error for an invalid one.
func parseList(fs *flag.FlagSet, args []string, need string, valid func(string) bool, bad string) ([]string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) == 0 {
		return nil, usageError(fs, "%s", need)
	}
	for _, a := range pos {
		if !valid(a) {
			return nil, usageError(fs, bad, a)
		}
	}
	return pos, nil
}

// parse parses args with fs, allowing flags after positional arguments;
// everything after "--" is positional. It returns the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	if !cli.WantsHelp(args) {
		// A mistake gets one usage line, not every flag: the error stays
		// in sight (cli.Main prints it last), and where the flags are
		// listed. -h prints the whole usage.
		fs.Usage = func() {
			name := strings.TrimPrefix(fs.Name(), "toolbus ")
			synopsis := "[flags]"
			if c, ok := lookup(name); ok {
				synopsis = strings.TrimSpace(c.args + " [flags]")
			}
			fmt.Fprintf(fs.Output(), "usage: toolbus %s %s   (toolbus %s -h lists the flags)\n", name, synopsis, name)
		}
	}
	if err := noUserFlag(fs, args); err != nil {
		return nil, err
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// noUserFlag refuses --user in a command that defines none: --user is the
// toolbus user, which such a command cannot apply, and it used to be the
// NATS login in these commands, so it must never pass silently.
func noUserFlag(fs *flag.FlagSet, args []string) error {
	if fs.Lookup("user") != nil {
		return nil
	}
	for _, a := range args {
		if a == "--" {
			return nil
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "user" {
			return fmt.Errorf("%s has no --user: --user is the toolbus user, which it cannot apply; log in to NATS as a user with --nats-user (or $NATS_USER)", fs.Name())
		}
	}
	return nil
}

// usageError prints fs's usage and returns an error saying what is wrong.
func usageError(fs *flag.FlagSet, format string, args ...any) error {
	fs.Usage()
	return fmt.Errorf(format, args...)
}

// checkID rejects an id that cannot be a subject token; what names it in
// the message ("--session", "call id").
func checkID(fs *flag.FlagSet, what, id string) error {
	if !bus.ValidID(id) {
		return usageError(fs, "%s %q must match ^[A-Za-z0-9_-]{1,128}$", what, id)
	}
	return nil
}

// harness runs toolbus-bench's harness name with args, found next to
// toolbus, on $PATH, or built from the module, so this CLI links no harness
// (docs/router.md "Layout").
func harness(name string) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		tmp, err := os.MkdirTemp("", "toolbus-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
		ps, _, err := cli.Helpers(ctx, "", tmp, logf, "toolbus-bench")
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		cmd := osexec.CommandContext(ctx, ps[0], append([]string{name}, args...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
		// A stop passes on as an interrupt: the harness stops the processes
		// it started.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		return cmd.Run()
	}
}

// renderReply prints every result, then every parked call, of a reply.
func renderReply(w io.Writer, r *bus.Reply, session, replyID string) {
	for _, res := range r.Results {
		renderResult(w, res)
	}
	for _, p := range r.Parked {
		fmt.Fprintln(w, parkedLine(p, session, replyID))
	}
}

// renderResult prints "name: state" (with the error code) and then each
// output block on its own lines.
func renderResult(w io.Writer, r bus.Result) {
	head := r.Name + ": " + r.State
	if r.Error != nil && r.Error.Code != "" {
		head += " (" + r.Error.Code + ")"
	}
	fmt.Fprintln(w, head)
	for _, b := range r.Output {
		fmt.Fprintln(w, blockText(b))
	}
}

// parkedLine describes a parked call and the command that answers it.
func parkedLine(p bus.Parked, session, replyID string) string {
	where := fmt.Sprintf("--session %s --reply %s --tool %s", session, replyID, p.Name)
	switch p.Kind {
	case bus.KindConfirm:
		return fmt.Sprintf("%s: parked for a confirmation, call %s\n  allow: toolbus confirm %s %s [--remember]\n  deny:  toolbus confirm %s %s --deny",
			p.Name, p.ID, p.ID, where, p.ID, where)
	case bus.KindExternal:
		return fmt.Sprintf("%s: parked for its external result, call %s (on %s)\n  answer: toolbus answer %s %s '<output>'",
			p.Name, p.ID, p.Subject, p.ID, where)
	}
	return fmt.Sprintf("%s: %s behind the calls above, call %s", p.Name, p.Kind, p.ID)
}

// blockText is a text block's text, or a one-line description of a data
// block: "[data image/png, 1024 bytes]" or "[data application/pdf, <url>]".
func blockText(b bus.Block) string {
	switch {
	case b.Type == bus.BlockText:
		return b.Text
	case client.IsStored(b):
		return fmt.Sprintf("[data %s, %d bytes, stored as %s; fetch it with: toolbus fetch %s]", b.MediaType, b.Size, b.URL, b.URL)
	case b.Type == bus.BlockData && b.URL != "":
		return fmt.Sprintf("[data %s, %s]", b.MediaType, b.URL)
	case b.Type == bus.BlockData:
		n := len(b.Data) // its encoded length when it does not decode
		if data, err := base64.StdEncoding.DecodeString(b.Data); err == nil {
			n = len(data)
		}
		return fmt.Sprintf("[data %s, %d bytes]", b.MediaType, n)
	}
	return fmt.Sprintf("[%s block]", b.Type)
}

// firstText is the first block of blocks as one short line.
func firstText(blocks []bus.Block) string {
	if len(blocks) == 0 {
		return ""
	}
	return short(blockText(blocks[0]))
}

// summaryWidth bounds the summary of an event line.
const summaryWidth = 100

// short folds s onto one line and cuts it to summaryWidth runes.
func short(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > summaryWidth {
		return string(r[:summaryWidth-1]) + "…"
	}
	return s
}

// eventLine is one line of `toolbus watch`: time, session (when withSession),
// type, tool call id and a summary of the data.
func eventLine(e *bus.Event, withSession bool) string {
	fields := []string{eventTime(e)}
	if withSession {
		fields = append(fields, orDash(e.SessionID))
	}
	fields = append(fields, e.Type, orDash(e.ToolCallID))
	if s := eventSummary(e); s != "" {
		fields = append(fields, s)
	}
	return strings.Join(fields, " ")
}

// eventTime is an event's time in local time, to the millisecond.
func eventTime(e *bus.Event) string {
	if t, err := time.Parse(time.RFC3339Nano, e.Time); err == nil {
		return t.Local().Format("2006-01-02 15:04:05.000")
	}
	return e.Time
}

func orDash(s string) string { return cmp.Or(s, "-") }

// eventSummary summarises an event's data: a result's state and first text,
// progress's sequence and text, the parked calls, a batch's states.
func eventSummary(e *bus.Event) string {
	switch e.Type {
	case bus.TypeCallResult:
		if r, ok := dataOf[bus.Result](e); ok {
			return strings.TrimSpace(r.Name + " " + r.State + ": " + firstText(r.Output))
		}
	case bus.TypeCallProgress:
		if p, ok := dataOf[bus.Progress](e); ok {
			return strings.TrimSpace(fmt.Sprintf("#%d %s", p.Seq, firstText(p.Output)))
		}
	case bus.TypeCallParked:
		if p, ok := dataOf[bus.ParkedEvent](e); ok {
			parts := make([]string, len(p.Calls))
			for i, c := range p.Calls {
				parts[i] = fmt.Sprintf("%s/%s (%s)", c.ID, c.Name, c.Kind)
			}
			return "parked " + strings.Join(parts, ", ")
		}
	case bus.TypeBatchDone:
		if d, ok := dataOf[bus.BatchDone](e); ok {
			parts := make([]string, len(d.Results))
			for i, r := range d.Results {
				parts[i] = r.ID + " " + r.State
			}
			return fmt.Sprintf("reply %s done: %s", orDash(e.ReplyID), strings.Join(parts, ", "))
		}
	}
	return short(string(e.Data))
}

// dataOf decodes e's data as a T; false when it does not decode.
func dataOf[T any](e *bus.Event) (v T, ok bool) {
	ok = e.DataAs(&v) == nil
	return v, ok
}

// toolEntry reads name and description of a listed tool in any format: the
// OpenAI chat format nests them under "function".
func toolEntry(raw json.RawMessage) (name, description string) {
	var t struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Function    *struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &t) != nil {
		return "?", short(string(raw))
	}
	if t.Name == "" && t.Function != nil {
		t.Name, t.Description = t.Function.Name, t.Function.Description
	}
	return t.Name, t.Description
}

// renderTools prints one line per tool, "name — description" (the first
// line of it), then the groups with [x] for the active ones.
func renderTools(w io.Writer, l *bus.ToolsList) {
	for _, raw := range l.Tools {
		line, desc := toolEntry(raw)
		if first, _, _ := strings.Cut(strings.TrimSpace(desc), "\n"); first != "" {
			line += " — " + first
		}
		fmt.Fprintln(w, clean(line))
	}
	if len(l.Groups) > 0 {
		fmt.Fprintln(w, "\ngroups:")
		for _, g := range l.Groups {
			fmt.Fprintln(w, groupLine(g))
		}
	}
	if l.SkillsPrompt != "" {
		fmt.Fprintln(w, "\nskills prompt (for the model's system prompt):")
		for _, line := range strings.Split(strings.TrimRight(l.SkillsPrompt, "\n"), "\n") {
			fmt.Fprintln(w, "  "+clean(line))
		}
	}
}

// groupLine is "  [x] name (scope) — description", [ ] when inactive.
func groupLine(g bus.GroupInfo) string {
	mark := "[ ]"
	if g.Active {
		mark = "[x]"
	}
	line := fmt.Sprintf("  %s %s", mark, g.Name)
	if g.Scope != "" {
		line += " (" + g.Scope + ")"
	}
	if g.Description != "" {
		line += " — " + g.Description
	}
	return clean(line)
}
