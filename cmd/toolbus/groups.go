package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/permission"
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
		if list.Groups == nil {
			list.Groups = []bus.GroupInfo{}
		}
		return writeJSON(stdout, list.Groups)
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
	res := reply.Results[0]
	if *asJSON {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		for _, b := range res.Output {
			fmt.Fprintln(stdout, blockText(b))
		}
	}
	return replyError(reply)
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
		return usageError(fs, "unknown --format %q", *format)
	}
	if *deferred && *format != bus.FormatOpenAIResponses && *format != bus.FormatAnthropic {
		return usageError(fs, "--deferred needs --format openai-responses or anthropic")
	}
	q := bus.ToolsQuery{Format: *format, Deferred: *deferred}
	var err error
	if q.User, err = jsonOrString(fs, "--user", *user); err != nil {
		return err
	}
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
		return writeJSON(stdout, list)
	case cli.Given(fs, "format"): // printed exactly as the model receives it
		return writeJSON(stdout, list.Tools)
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
	var raw json.RawMessage
	if err := admin(ctx, cl, verb, cn.session, data, &raw); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, raw)
	}
	var v sessionView
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("%s: the reply is not a session: %w", verb, err)
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
		return b + " " + r.Tool
	}
	return b + " " + r.Tool + "(" + r.Pattern + ")"
}
