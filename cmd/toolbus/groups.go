package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/skills"
)

func runGroups(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("groups", stderr)
	asJSON := fs.Bool("json", false, "print the groups as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return editGroups(ctx, fs, cn, pos, stdout)
	}
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	list, err := cl.Tools(ctx, cn.session, bus.FormatToolbus, nil)
	if err != nil {
		return err
	}
	if *asJSON {
		return cli.WriteJSON(stdout, append([]bus.GroupInfo{}, list.Groups...)) // [] when none
	}
	for _, g := range list.Groups {
		fmt.Fprintln(stdout, groupLine(g))
	}
	return nil
}

func runReset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("reset", stderr)
	asJSON := fs.Bool("json", false, "print the result of reset_tools as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	replyID := client.NewReplyID()
	batch := bus.Batch{Calls: []bus.Call{{ID: callIDFor(replyID, 0, 1), Name: groups.ResetTools, Input: client.ResetInput(pos)}}}
	reply, err := cl.Call(ctx, cn.session, batch, client.WithReplyID(replyID))
	if err != nil {
		return callError(ctx, cl, cn.session, replyID, err, *asJSON, stdout)
	}
	if len(reply.Results) != 1 {
		// reset_tools runs in the router and never parks; say so if it did.
		renderReply(stdout, reply, cn.session, replyID)
		return fmt.Errorf("%s did not finish in reply %s", groups.ResetTools, replyID)
	}
	if res := reply.Results[0]; *asJSON {
		err = cli.WriteJSON(stdout, res)
	} else {
		for _, b := range res.Output {
			fmt.Fprintln(stdout, blockText(b))
		}
	}
	return cmp.Or(err, replyError(reply))
}

// editGroups runs `groups put FILE` (a group definition, docs/protocol.md
// 7.3, in YAML or JSON; '-' is stdin) and `groups rm NAME`, through the
// operator's admin verbs groups.put and groups.delete.
func editGroups(ctx context.Context, fs *flag.FlagSet, cn *conn, pos []string, stdout io.Writer) error {
	if len(pos) != 2 || (pos[0] != "put" && pos[0] != "rm") {
		return usageError(fs, "groups takes no arguments, or put FILE, or rm NAME; got %q", strings.Join(pos, " "))
	}
	verb, arg := pos[0], pos[1]
	var out struct {
		Group   string `json:"group"`
		Deleted string `json:"deleted"`
	}
	var data any
	adminVerb, did, name := "groups.put", "stored", &out.Group
	switch verb {
	case "put":
		raw, err := readInput(arg, os.Stdin)
		if err != nil {
			return err
		}
		js, err := yaml.YAMLToJSON(raw) // JSON is YAML too
		if err != nil {
			return usageError(fs, "groups put %s: not YAML or JSON: %v", arg, err)
		}
		data = json.RawMessage(js)
	case "rm":
		if !bus.ValidName(arg) {
			return usageError(fs, "group name %q must match ^[A-Za-z0-9_-]{1,64}$", arg)
		}
		data = map[string]string{"name": arg}
		adminVerb, did, name = "groups.delete", "removed", &out.Deleted
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	if err := admin(ctx, cl, adminVerb, "", data, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s group %s\n", did, *name)
	return nil
}

// formats are the listing formats of io.toolbus.tools.query.
var formats = []string{bus.FormatToolbus, bus.FormatOpenAI, bus.FormatOpenAIResponses,
	bus.FormatAnthropic, bus.FormatGemini, bus.FormatMCP}

func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("tools", stderr)
	format := fs.String("format", bus.FormatToolbus, "print the tools as the model sees them, as JSON, in this format: toolbus, openai, openai-responses, anthropic, gemini or mcp (without it: a readable list)")
	asJSON := fs.Bool("json", false, "print the whole reply data (tools in --format, groups, skills_prompt) as JSON")
	deferred := fs.Bool("deferred", false, "also list the tools of inactive meta groups, deferred for the provider's tool search (with --format openai-responses or anthropic)")
	user := fs.String("user", "", "list as this toolbus user sees it (their skills); refused by a secured router unless it is the credentials' own")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if !slices.Contains(formats, *format) {
		return usageError(fs, "unknown --format %q (want %s)", *format, strings.Join(formats, ", "))
	}
	if *deferred && *format != bus.FormatOpenAIResponses && *format != bus.FormatAnthropic {
		return usageError(fs, "--deferred needs --format openai-responses or anthropic")
	}
	q := bus.ToolsQuery{Format: *format, Deferred: *deferred, User: jsonOrString(*user)}
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	list, err := cl.Query(ctx, cn.session, q)
	if err != nil {
		return err
	}
	switch {
	case *asJSON:
		return cli.WriteJSON(stdout, list)
	case cli.Given(fs, "format"): // printed exactly as the model receives it
		return cli.WriteJSON(stdout, list.Tools)
	}
	renderTools(stdout, list)
	return nil
}

// modes are the permission modes of admin session.mode.
var modes = []string{permission.Default, permission.AcceptEdits, permission.Explore, permission.Bypass, permission.DontAsk}

func runSession(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("session", stderr)
	asJSON := fs.Bool("json", false, "print the session as JSON (the admin reply)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError(fs, "session needs show or mode <mode>")
	}
	var verb string
	var data any
	switch pos[0] {
	case "show":
		if len(pos) != 1 {
			return usageError(fs, "session show takes no arguments, got %q", pos[1])
		}
		verb = "session.get"
	case "mode":
		if len(pos) != 2 {
			return usageError(fs, "session mode takes one mode (%s), got %d arguments", strings.Join(modes, ", "), len(pos)-1)
		}
		if !slices.Contains(modes, pos[1]) {
			return usageError(fs, "unknown mode %q: want %s", pos[1], strings.Join(modes, ", "))
		}
		verb, data = "session.mode", map[string]string{"mode": pos[1]}
	default:
		return usageError(fs, "unknown session command %q: want show or mode", pos[0])
	}
	return adminSession(ctx, fs, cn, verb, data, *asJSON, stdout)
}

func runActivate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("activate", stderr)
	off := fs.Bool("off", false, "deactivate the groups instead")
	asJSON := fs.Bool("json", false, "print the session as JSON (the admin reply)")
	pos, err := parseList(fs, args, "activate needs at least one group name", bus.ValidName, "group name %q must match ^[A-Za-z0-9_-]{1,64}$")
	if err != nil {
		return err
	}
	data := map[string]any{"groups": pos, "active": !*off}
	return adminSession(ctx, fs, cn, "session.activate", data, *asJSON, stdout)
}

// adminSession checks --session, runs a session verb, all of which reply
// with the session, and prints that session.
func adminSession(ctx context.Context, fs *flag.FlagSet, cn *conn, verb string, data any, asJSON bool, stdout io.Writer) error {
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	raw, v, err := adminReply[sessionView](ctx, cl, verb, cn.session, data)
	switch {
	case err != nil:
		return err
	case asJSON:
		return cli.WriteJSON(stdout, raw)
	}
	renderSession(stdout, &v)
	return nil
}

// admin runs an admin verb; a refusal names the verb and the code.
func admin(ctx context.Context, cl *client.Client, verb, session string, data, out any) error {
	if err := cl.Admin(ctx, verb, session, data, out); err != nil {
		return fmt.Errorf("admin %s: %w", verb, err)
	}
	return nil
}

// adminReply runs an admin verb and returns its reply data as sent and
// decoded as a T.
func adminReply[T any](ctx context.Context, cl *client.Client, verb, session string, data any) (raw json.RawMessage, v T, err error) {
	if err = admin(ctx, cl, verb, session, data, &raw); err == nil && json.Unmarshal(raw, &v) != nil {
		err = fmt.Errorf("admin %s: the reply is not what it should be: %s", verb, short(string(raw)))
	}
	return raw, v, err
}

// sessionView is the reply of the session verbs: the session's groups as its
// model sees them and its stored state.
type sessionView struct {
	Session string          `json:"session"`
	Stored  bool            `json:"stored"`
	Groups  []bus.GroupInfo `json:"groups"`
	State   struct {
		Active   []string   `json:"active"`
		Mode     string     `json:"mode"`
		Rules    []bus.Rule `json:"rules"`
		WorkDirs []string   `json:"work_dirs"`
		Updated  time.Time  `json:"updated"`
	} `json:"state"`
}

// renderSession prints the session: whether it is stored, its mode, its
// groups ([x] when active), its permission rules and working directories.
func renderSession(w io.Writer, v *sessionView) {
	head := "session " + v.Session
	switch {
	case !v.Stored:
		head += " (not stored yet: the defaults)"
	case !v.State.Updated.IsZero():
		head += " (updated " + v.State.Updated.Local().Format("2006-01-02 15:04:05") + ")"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, "mode: "+orDash(v.State.Mode))
	fmt.Fprintln(w, "groups:")
	for _, g := range v.Groups {
		fmt.Fprintln(w, groupLine(g))
	}
	if len(v.State.Rules) == 0 {
		fmt.Fprintln(w, "rules: none")
	} else {
		fmt.Fprintln(w, "rules:")
		for _, r := range v.State.Rules {
			fmt.Fprintln(w, "  "+ruleText(r))
		}
	}
	if len(v.State.WorkDirs) > 0 {
		fmt.Fprintln(w, "work dirs: "+strings.Join(v.State.WorkDirs, ", "))
	}
}

// rulesText is the rules' ruleText, comma-separated.
func rulesText(rules []bus.Rule) string {
	texts := make([]string, len(rules))
	for i, r := range rules {
		texts[i] = ruleText(r)
	}
	return strings.Join(texts, ", ")
}

// ruleText is "behavior tool" or "behavior tool(pattern)"; no behavior
// means allow.
func ruleText(r bus.Rule) string {
	b := cmp.Or(r.Behavior, permission.Allow)
	if r.Pattern == "" {
		return clean(b + " " + r.Tool)
	}
	return clean(b + " " + r.Tool + "(" + r.Pattern + ")")
}

func runSkills(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("skills", stderr)
	user := fs.String("user", "", "push or remove the skill scoped to this user (visible only to that user's batches and queries)")
	asJSON := fs.Bool("json", false, "ls and show: print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError(fs, "skills wants ls, show <name>, push DIR or rm <name>")
	}
	verb, rest := pos[0], pos[1:]
	want := map[string]int{"ls": 0, "show": 1, "push": 1, "rm": 1}
	n, ok := want[verb]
	if !ok {
		return usageError(fs, "unknown skills command %q: want ls, show, push or rm", verb)
	}
	if len(rest) != n {
		return usageError(fs, "skills %s takes %d argument(s), got %d", verb, n, len(rest))
	}
	switch verb {
	case "push":
		// Check before connecting: a broken skill never reaches the bus.
		s, err := skills.LoadFolder(rest[0])
		if err == nil {
			var os jetstream.ObjectStore
			if os, err = cn.objects(ctx); err != nil {
				return err
			}
			s, err = skills.Push(ctx, os, rest[0], *user)
		}
		if err != nil {
			return fmt.Errorf("not pushed: %w", err)
		}
		fmt.Fprintf(stdout, "pushed skill %s (%s) for %s: %s\n", s.Name, s.Digest, scopeName(*user), s.Source)
		return nil
	case "rm":
		os, err := cn.objects(ctx)
		if err != nil {
			return err
		}
		if err := skills.Remove(ctx, os, rest[0], *user); err != nil {
			if errors.Is(err, skills.ErrNotFound) {
				return fmt.Errorf("no skill %s in the object store for %s", rest[0], scopeName(*user))
			}
			return err
		}
		fmt.Fprintf(stdout, "removed skill %s for %s\n", rest[0], scopeName(*user))
		return nil
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	var list struct {
		Skills []bus.SkillInfo `json:"skills"`
	}
	if err := cl.Admin(ctx, "skills.list", "", struct{}{}, &list); err != nil {
		return err
	}
	if verb == "ls" {
		if *asJSON {
			return cli.WriteJSON(stdout, list.Skills)
		}
		if len(list.Skills) == 0 {
			fmt.Fprintln(stdout, "no skills")
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for _, s := range list.Skills {
			fmt.Fprintln(tw, skillLine(s))
		}
		return tw.Flush()
	}
	// show
	var found *bus.SkillInfo
	for i, s := range list.Skills {
		if s.Name == rest[0] && (s.User == *user || found == nil && s.User == "") {
			found = &list.Skills[i]
		}
	}
	if found == nil {
		return fmt.Errorf("no skill %s", rest[0])
	}
	if *asJSON {
		return cli.WriteJSON(stdout, found)
	}
	fmt.Fprintf(stdout, "%s\n  description: %s\n  source: %s\n  digest: %s\n", clean(found.Name), clean(found.Description), clean(found.Source), clean(found.Digest))
	if found.User != "" {
		fmt.Fprintf(stdout, "  user: %s\n", clean(found.User))
	}
	if len(found.Groups) > 0 {
		fmt.Fprintf(stdout, "  groups: %s\n", strings.Join(found.Groups, ", "))
	}
	return nil
}

func scopeName(user string) string {
	if user == "" {
		return "every user"
	}
	return "user " + user
}

// skillLine is one line of skills ls, its columns tab-separated (name
// with its user and groups, description, source, digest).
func skillLine(s bus.SkillInfo) string {
	name := s.Name
	if s.User != "" {
		name += " [user " + s.User + "]"
	}
	if len(s.Groups) > 0 {
		name += " [groups " + strings.Join(s.Groups, ", ") + "]"
	}
	digest := strings.TrimPrefix(s.Digest, "sha256:")
	digest = digest[:min(12, len(digest))]
	return clean(name) + fmt.Sprintf("\t%s\t%s\t(%s)", clean(s.Description), clean(s.Source), clean(digest))
}

// objects connects and opens the deployment's skills object store (the
// routers create it).
func (cn *conn) objects(ctx context.Context) (jetstream.ObjectStore, error) {
	nc, err := cn.connect(ctx)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	bucket := bus.NewSubjects(cn.prefix).ObjectStore(bus.ObjectSkills)
	os, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("skills object store %s (is a router running with prefix %q?): %w", bucket, cn.prefix, err)
	}
	return os, nil
}
