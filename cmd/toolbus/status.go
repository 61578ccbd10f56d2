package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/security"
)

// instance is one router or worker found by NATS micro discovery. Only Go
// workers answer it; the status verb names every live worker (protocol
// 1.29), and status counts those an older router does not name (unlisted).
// Stats are its micro STATS, by endpoint (a worker's: by tool).
type instance struct {
	Kind  string               `json:"kind"`
	ID    string               `json:"id"`
	Meta  map[string]string    `json:"metadata"`
	Tools []string             `json:"tools,omitempty"`
	Stats map[string]toolStats `json:"stats,omitempty"`
}

// toolStats is what micro STATS count of one endpoint (a worker's tool):
// the requests delivered, those that ended in error, and their average
// run (a worker's: its calls').
type toolStats struct {
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	AverageMS float64 `json:"average_ms"`
}

// maxInstances bounds the discovery answers status collects of each kind:
// anyone who may answer $SRV requests would grow it (and its output)
// without end.
const maxInstances = 1024

// maxDiscoveryBytes bounds the bytes of the answers status keeps of each
// kind.
const maxDiscoveryBytes = 16 << 20

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("status", stderr)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	wait := fs.Duration("wait", 300*time.Millisecond, "how long to collect discovery answers from routers and workers")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	var st bus.Status
	if err := admin(ctx, cl, "status", "", nil, &st); err != nil {
		return err
	}
	// STATS, which names the endpoints as INFO does, with their counts.
	var found []instance
	for _, kind := range []string{"router", "worker"} {
		answers, err := discover(ctx, cl.Conn(), "toolbus-"+kind, *wait)
		if err != nil {
			return err
		}
		for _, in := range answers {
			if in.Metadata["prefix"] != "" && in.Metadata["prefix"] != cn.prefix {
				continue
			}
			// the instance id toolbus uses, not micro's own
			it := instance{Kind: kind, ID: cmp.Or(in.Metadata[kind], in.ID), Meta: in.Metadata, Stats: map[string]toolStats{}}
			for _, ep := range in.Endpoints {
				it.Tools = append(it.Tools, ep.Name)
				st := it.Stats[ep.Name] // two workers of a connection may serve one tool
				if n := st.Requests + ep.NumRequests; n > 0 {
					st.AverageMS = (st.AverageMS*float64(st.Requests) + ep.AverageProcessingTime.Seconds()*1e3*float64(ep.NumRequests)) / float64(n)
				}
				st.Requests += ep.NumRequests
				st.Errors += ep.NumErrors
				it.Stats[ep.Name] = st
			}
			found = append(found, it)
		}
	}
	slices.SortFunc(found, func(a, b instance) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.ID, b.ID))
	})
	var hidden map[string]int
	named := slices.ContainsFunc(st.Tools, func(t bus.ToolStatus) bool { return len(t.Workers) > 0 })
	if !named {
		hidden = unlisted(st.Tools, found) // a router before 1.29 names no worker
	}
	if *asJSON {
		v := map[string]any{"status": st, "instances": found}
		if hidden != nil {
			v["unlisted"] = hidden
		}
		return json.NewEncoder(stdout).Encode(v)
	}
	sessions := fmt.Sprintf("%d in this router's cache", st.Sessions)
	if st.SessionsStored != nil {
		sessions = fmt.Sprintf("%d stored (%d in this router's cache)", *st.SessionsStored, st.Sessions)
	}
	fmt.Fprintf(stdout, "sessions: %s   parked calls: %d   groups: %d   (answered by router %s)\n", sessions, st.Parked, st.Groups, clean(st.Router))
	fmt.Fprintln(stdout, clean(storeLine(st.Store)))
	for _, l := range boundLines(st.Store.Bounds, time.Now()) {
		fmt.Fprintln(stdout, clean(l))
	}
	for _, w := range st.Warnings {
		fmt.Fprintln(stdout, "warning:", clean(w))
	}
	// Columns sized to their longest cell: long bridged MCP names
	// (mcp__server__tool) no longer push the others out of line.
	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "tools:")
	for _, t := range st.Tools {
		live := fmt.Sprintf("%d live workers", t.LiveWorkers)
		if t.External {
			live = "external"
		}
		fmt.Fprintf(tw, "  %s\t%s\tgroups: %s\n", clean(t.Name), live, clean(strings.Join(t.Groups, ", ")))
		for _, id := range t.Workers {
			fmt.Fprintf(tw, "    %s\t%s\n", clean(id), discovered(found, id, t.Name))
		}
		if n := t.LiveWorkers - len(t.Workers); n > 0 && named {
			fmt.Fprintf(tw, "    %d more\t(the router's reply names at most %d a tool, as many as fit)\n", n, bus.StatusWorkers)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(tw, "instances (NATS micro discovery):")
	for _, it := range found {
		fmt.Fprintf(tw, "  %s\t%s\t[%s]\n", it.Kind, clean(it.ID), clean(strings.Join(it.Tools, " ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(hidden) > 0 {
		var each []string
		for _, t := range st.Tools {
			if n := hidden[t.Name]; n > 0 {
				each = append(each, fmt.Sprintf("%d of %s", n, t.Name))
			}
		}
		fmt.Fprintf(stdout, "live workers not listed above: %s (the routers count workers by their beats; Python and Java workers answer no micro discovery, and a durable tool has no endpoint to list)\n",
			strings.Join(each, ", "))
	}
	return nil
}

// discovered is what discovery found of worker id and its tool, or that it
// answered none.
func discovered(found []instance, id, tool string) string {
	for _, it := range found {
		if it.Kind == "worker" && slices.Contains(strings.Split(it.ID, ","), id) {
			st, ok := it.Stats[tool]
			if !ok {
				return fmt.Sprintf("discovery: %d endpoints (instances below)", len(it.Tools))
			}
			counts := fmt.Sprintf("%d requests, %d errors", st.Requests, st.Errors)
			if st.Requests > 0 {
				counts += fmt.Sprintf(", average run %v", time.Duration(st.AverageMS*1e6).Round(time.Microsecond))
			}
			return counts + fmt.Sprintf("; discovery: %d endpoints (instances below)", len(it.Tools))
		}
	}
	return "no discovery (its beats only: a Python or Java worker, or a durable tool's)"
}

// unlisted counts, by tool, the live workers the routers count (by their
// beats) beyond those discovery listed with the tool: workers that answer
// no NATS micro discovery (the Python and Java SDKs serve none) and the
// workers of a durable tool (served from its work queue, no endpoint).
func unlisted(tools []bus.ToolStatus, found []instance) map[string]int {
	listed := map[string]int{}
	for _, it := range found {
		for _, name := range it.Tools {
			listed[name]++
		}
	}
	out := map[string]int{}
	for _, t := range tools {
		if n := t.LiveWorkers - listed[t.Name]; n > 0 && !t.External {
			out[t.Name] = n
		}
	}
	return out
}

// storeLine is the status line of the store's health: "store: ok", or
// "store: full (JetStream: insufficient resources) since 10:41:34Z".
func storeLine(s bus.StoreStatus) string {
	switch {
	case s.State == "":
		return "store: unknown (the router does not report it)"
	case s.State == "ok":
		return "store: ok"
	}
	line := fmt.Sprintf("store: %s (JetStream: %s)", s.State, s.Error)
	if s.Since != nil {
		line += " since " + s.Since.UTC().Format(time.RFC3339)
	}
	return line
}

// boundRecent is how long after a refusal status says a bucket refuses.
const boundRecent = time.Minute

// boundLines are status's lines of the buckets' soft bounds (protocol
// 1.24): each bucket's bytes against its bound, then a warning for one at
// 90 % of it or more, or that refused a new key within boundRecent. P_mcp's
// refusals are those of the MCP facade the router serves (store.Store.Bounds).
// The result cache (cache) drops its oldest entries at its bound, refusing
// nothing: full is how it works, so it is never warned of.
func boundLines(bs []bus.BoundStatus, now time.Time) []string {
	var lines, warns []string
	for _, b := range bs {
		pct := 100 * float64(b.Bytes) / float64(max(b.Bound, 1))
		line := fmt.Sprintf("  %s: %s of %s (%.0f%%)", b.Bucket, mib(b.Bytes), mib(b.Bound), pct)
		if b.Refused > 0 {
			line += fmt.Sprintf(", %d new keys refused since the router started", b.Refused)
		}
		if b.DropsOldest {
			line += ", its oldest entries dropped past it (nothing refused)"
		}
		lines = append(lines, line)
		switch {
		case b.DropsOldest: // a full cache is working as meant
		case b.LastRefused != nil && now.Sub(*b.LastRefused) < boundRecent:
			warns = append(warns, fmt.Sprintf("warning: %s refuses new keys at its bound (the last at %s): its calls or sessions end limit_exceeded (docs/operations.md)",
				b.Bucket, b.LastRefused.UTC().Format(time.RFC3339)))
		case pct >= 90:
			warns = append(warns, fmt.Sprintf("warning: %s is near its bound (%.0f%%): new keys are refused at it (docs/operations.md)", b.Bucket, pct))
		}
	}
	return append(lines, warns...)
}

// mib is n bytes in MiB, one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// discover collects the micro STATS answers of every instance of service
// name that answers within wait, at most maxInstances of them and
// maxDiscoveryBytes in all.
func discover(ctx context.Context, nc *nats.Conn, name string, wait time.Duration) ([]micro.Stats, error) {
	subject, err := micro.ControlSubject(micro.StatsVerb, name, "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewInbox() // with the connection's inbox prefix, which a secured role must use
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out []micro.Stats
	for size := 0; len(out) < maxInstances; {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil { // wait has passed (or ctx ended)
			break
		}
		if size += len(m.Data); size > maxDiscoveryBytes {
			break
		}
		var in micro.Stats
		if json.Unmarshal(m.Data, &in) == nil {
			out = append(out, in)
		}
	}
	return out, nil
}

// runLimits is `toolbus limits`: what each rule counting the tool has used
// and left for the user and session (admin verb limits), or limits.reset.
func runLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("limits", stderr)
	tool := fs.String("tool", "", "the tool (none: every rule)")
	user := fs.String("user", "", "the toolbus user the counts are for")
	reset := fs.Bool("reset", false, "forget what the rules (or --rule) counted for the tool, user and session")
	rule := fs.String("rule", "", "with --reset: only this rule")
	asJSON := fs.Bool("json", false, "print the reply data as JSON")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if *rule != "" && !*reset {
		return usageError(fs, "--rule goes with --reset")
	}
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	q := map[string]string{"tool": *tool, "user": *user, "session": cn.session}
	verb := "limits"
	if *reset {
		verb, q["rule"] = "limits.reset", *rule
	}
	raw, r, err := adminReply[struct {
		Reset  int            `json:"reset"`
		Limits []limits.Usage `json:"limits"`
	}](ctx, cl, verb, "", q)
	switch {
	case err != nil:
		return err
	case *asJSON:
		return cli.WriteJSON(stdout, raw)
	case *reset:
		_, err = fmt.Fprintf(stdout, "reset %d count(s)\n", r.Reset)
		return err
	case len(r.Limits) == 0:
		_, err = fmt.Fprintln(stdout, "no quota or rate limit counts these calls")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKIND\tPER\tUSED\tLEFT\tLIMIT\tRESETS IN")
	for _, u := range r.Limits {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%v\n", u.Rule, u.Kind, u.Per, u.Used, u.Left, u.Limit, (time.Duration(u.ResetMS) * time.Millisecond).Round(time.Second))
	}
	return tw.Flush()
}

// runAudit is `toolbus audit`: the audit trail's records (P_AUDIT) since
// --since, of one session and tool when given, as JSON lines (--json) or
// a table. It reads the stream directly with an ordered consumer, as any
// NATS consumer may (docs/operations.md "Audit to a SIEM").
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("audit", stderr)
	since := fs.Duration("since", time.Hour, "how far back (0: everything kept)")
	tool := fs.String("tool", "", "only this tool's calls")
	user := fs.String("user", "", "only the calls of this toolbus user (the batch's runtime user; the NATS login is --nats-user)")
	asJSON := fs.Bool("json", false, "print the records as JSON lines, as stored")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if *since < 0 {
		return usageError(fs, "--since must not be negative")
	}
	session, err := cn.sessionIf(fs, cli.Given(fs, "session")) // else every session
	if err != nil {
		return err
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	js, err := jetstream.New(cl.Conn())
	if err != nil {
		return err
	}
	f := audit.Filter{Session: session, Tool: *tool}
	if *since > 0 {
		f.Since = time.Now().Add(-*since)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0) // unused with --json
	if !*asJSON {
		fmt.Fprintln(tw, "TIME\tSESSION\tCALL\tTOOL\tUSER\tDECISION\tBY\tOUTCOME\tMS")
	}
	err = audit.Export(ctx, js, cl.Subjects(), f, func(raw json.RawMessage) error {
		var r audit.Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("audit: a record does not decode: %w", err)
		}
		if *user != "" && r.User != *user {
			return nil
		}
		if *asJSON {
			_, err := fmt.Fprintf(stdout, "%s\n", raw)
			return err
		}
		out := r.Outcome.State
		if r.Outcome.Code != "" {
			out += " " + r.Outcome.Code
		}
		if r.Suppressed > 0 {
			out += fmt.Sprintf(" (+%d refusals not recorded)", r.Suppressed)
		}
		_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.Time.Format(time.RFC3339), clean(r.Session), clean(orDash(r.CallID)), clean(orDash(r.Tool)), clean(r.User), clean(r.Decision.Behavior), clean(orDash(r.Decision.Approver)), clean(out), r.DurationMS)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: the routers keep no audit trail until their --config has an audit block (docs/guardrails.md)", err)
	}
	if err != nil {
		return err
	}
	return tw.Flush()
}

// runSecurity is `toolbus security config`: the roles' permissions for an
// existing deployment (docs/security.md).
func runSecurity(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	subs := map[string]func(args []string, stdout, stderr io.Writer) error{"agent": runSecurityAgent, "token": runSecurityToken, "refresh": runSecurityRefresh}
	if len(args) > 0 && subs[args[0]] != nil {
		return subs[args[0]](args[1:], stdout, stderr)
	}
	c, _ := lookup("security")
	fs := securityFlagSet("security", fmt.Sprintf("usage: toolbus security %s\n\n%s.", c.args, c.summary), stderr)
	prefix := fs.String("prefix", bus.DefaultPrefix, "subject prefix of the deployment")
	var sessions, handlers, workers []string
	fs.Func("session", "add an agent user confined to this session (repeatable)", func(v string) error { sessions = append(sessions, v); return nil })
	fs.Func("handler", "add an external handler user: NAME=tool,tool (repeatable)", func(v string) error { handlers = append(handlers, v); return nil })
	fs.Func("worker", "add a worker login of its own, worker-NAME, confined to its tools and alone in an account: NAME=tool,tool (repeatable)", func(v string) error { workers = append(workers, v); return nil })
	workerTools := fs.String("worker-tools", "", "confine the worker user to these comma-separated tools: it serves and defines only them (default: every tool)")
	workerGroups := fs.String("worker-groups", "", "with --worker-tools: the comma-separated groups the worker may define (default: none)")
	workerShared := fs.Bool("worker-shared-register", false, "also let the worker publish on P.register, the registration subject of protocol 1.11, while workers are updated to 1.12 (any definition goes there: remove it once every worker is updated)")
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
		return usageError(fs, "security takes one subcommand: config, agent, refresh or token")
	}
	spec := security.Spec{Prefix: *prefix, Sessions: sessions, WorkerTools: cli.SplitList(*workerTools), WorkerGroups: cli.SplitList(*workerGroups),
		WorkerSharedRegister: *workerShared, ApproverTools: cli.SplitList(*approverTools), AgentAnswers: cli.SplitList(*agentAnswers),
		FacadeAnswers: cli.SplitList(*facadeAnswers)}
	for _, f := range []struct {
		flag string
		in   []string
		out  *[]security.Handler
	}{{"--handler", handlers, &spec.Handlers}, {"--worker", workers, &spec.Workers}} {
		for _, h := range f.in {
			name, tools, ok := strings.Cut(h, "=")
			if !ok || cli.SplitList(tools) == nil {
				return usageError(fs, "%s %q must be NAME=tool,tool", f.flag, h)
			}
			*f.out = append(*f.out, security.Handler{Name: name, Tools: cli.SplitList(tools)})
		}
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
		if err := security.CheckPasswordNames(users); err != nil {
			return err
		}
		fmt.Fprint(stdout, security.ServerConfig(*prefix, users, nil))
	}
	return nil
}

// securityFlagSet is the flag set of `toolbus name`, a security command
// without the connection flags: its usage is head, then its flags.
func securityFlagSet(name, head string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("toolbus "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = cli.GroupedUsage(fs, head+"\n", nil, "")
	return fs
}

// runSecurityAgent is `toolbus security agent --session S [--user U]
// [--dir DIR]`: a per-session agent user in a --secure directory, which a
// router picks up without a restart.
func runSecurityAgent(args []string, stdout, stderr io.Writer) error {
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

// runSecurityRefresh is `toolbus security refresh`: a directory of `--out`
// (or `--secure`) brought to this version's rendering, keys kept
// (security.Refresh: what `router --secure` does at each start).
func runSecurityRefresh(args []string, stdout, stderr io.Writer) error {
	fs := securityFlagSet("security refresh", "usage: toolbus security refresh [--dir DIR]\n\n"+
		"Rewrite DIR's nats-server.conf and users.json from its spec.json as this version renders them, every\n"+
		"key kept (what router --secure does at each start); nothing is written when DIR is up to date.", stderr)
	dir := fs.String("dir", os.Getenv("TOOLBUS_SECURE"), "the directory of --out or --secure (default $TOOLBUS_SECURE)")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usageError(fs, "--dir (or $TOOLBUS_SECURE) names the directory")
	}
	if _, err := os.Stat(filepath.Join(*dir, security.UsersFile)); err != nil {
		return fmt.Errorf("%s holds no %s: generate it first (router --secure %s, or toolbus security config --out %s)", *dir, security.UsersFile, *dir, *dir)
	}
	wrote, err := security.Refresh(*dir)
	if err != nil {
		return err
	}
	if !wrote {
		_, err = fmt.Fprintf(stdout, "toolbus: %s is up to date\n", *dir)
		return err
	}
	_, err = fmt.Fprintf(stdout, "toolbus: updated the permissions in %s to this version's (keys kept); reload its nats-server (%s)\n",
		*dir, filepath.Join(*dir, security.ServerConfigFile))
	return err
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
