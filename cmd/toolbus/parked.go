package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/cli"
)

// listParked returns the parked calls of session ("" for every session):
// every page of parked.list, each input left out of its page
// (input_omitted) read on its own (docs/protocol.md 9). An old router
// answers in one page, without next.
func listParked(ctx context.Context, cl *client.Client, session string) ([]bus.ParkedCall, error) {
	var calls []bus.ParkedCall
	asked := map[string]bool{} // a router that repeats a cursor would keep the walk going forever
	var q bus.ParkedQuery
	for !asked[q.After] {
		asked[q.After] = true
		_, pg, err := adminReply[bus.ParkedPage](ctx, cl, "parked.list", session, q)
		if err != nil {
			return nil, err
		}
		for _, p := range pg.Parked {
			if p.InputOmitted { // the page of p alone has its input if any does
				if _, one, err := adminReply[bus.ParkedPage](ctx, cl, "parked.list", p.Session, bus.ParkedQuery{After: q.After, Limit: 1}); err == nil &&
					len(one.Parked) == 1 && one.Parked[0].Revision == p.Revision && one.Parked[0].ID == p.ID && one.Parked[0].ReplyID == p.ReplyID {
					p = one.Parked[0]
				}
			}
			calls = append(calls, p)
			q.After = p.Cursor()
		}
		if pg.Next == "" || len(pg.Parked) == 0 {
			return calls, nil
		}
		q.After = pg.Next
	}
	return nil, fmt.Errorf("parked.list: the router's pages did not advance (cursor %q again)", q.After)
}

func runParked(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("parked", stderr)
	all := fs.Bool("all", false, "list the parked calls of every session, not only of --session")
	asJSON := fs.Bool("json", false, "print the reply data as JSON")
	history := fs.Bool("history", false, "list the calls that no longer wait (answered, done, expired, cancelled; kept 7 days), with who answered and when")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError(fs, "parked takes at most a call id, got %d arguments", len(pos))
	}
	for _, id := range pos {
		if err := checkID(fs, "call id", id); err != nil {
			return err
		}
	}
	// A call id finds its session.
	session, err := cn.sessionIf(fs, !*all && (len(pos) == 0 || cli.Given(fs, "session")))
	if err != nil {
		return err
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	if *history {
		recs, err := parkedHistory(ctx, cl, session)
		switch {
		case err != nil:
			return err
		case *asJSON:
			return cli.WriteJSON(stdout, recs)
		case len(recs) == 0:
			fmt.Fprintf(stderr, "no answered or ended calls in %s\n", where(session))
			return nil
		}
		renderHistory(stdout, recs)
		return nil
	}
	calls, err := listParked(ctx, cl, session)
	switch {
	case err != nil:
		return err
	case len(pos) == 1:
		return showParked(stdout, calls, pos[0], session, *asJSON)
	case *asJSON:
		return cli.WriteJSON(stdout, map[string]any{"parked": calls})
	case len(calls) == 0:
		fmt.Fprintf(stderr, "no parked calls in %s\n", where(session))
		return nil
	}
	renderParked(stdout, calls, time.Now())
	return nil
}

// showParked prints the parked calls with call id id, each with the command
// that answers it; none is a not_parked error.
func showParked(stdout io.Writer, calls []bus.ParkedCall, id, session string, asJSON bool) error {
	found, err := matching(calls, session, id, "", "")
	if err != nil {
		return err
	}
	if asJSON {
		return cli.WriteJSON(stdout, map[string]any{"parked": found})
	}
	renderParked(stdout, found, time.Now())
	for _, p := range found {
		fmt.Fprintf(stdout, "next: %s\n", nextCommand(p, len(found) > 1))
	}
	return nil
}

// nextCommand is the toolbus command that answers parked call p; with
// exact, it names the session and reply too.
func nextCommand(p bus.ParkedCall, exact bool) string {
	cmd, tail := "toolbus answer "+p.ID+" '<output>'", ""
	if p.Kind == bus.KindConfirm {
		cmd, tail = "toolbus confirm "+p.ID, " [--deny]"
	}
	if exact {
		cmd += " --session " + p.Session + " --reply " + p.ReplyID
	}
	return cmd + tail
}

// renderParked prints a table of parked calls: session, reply id, call id,
// tool, kind, age at now, and the input.
func renderParked(w io.Writer, calls []bus.ParkedCall, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tREPLY\tCALL\tTOOL\tKIND\tAGE\tINPUT")
	for _, p := range calls {
		input := inputText(p.Input)
		if p.InputOmitted {
			input = "(larger than a reply can carry; input_digest " + p.InputDigest + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(p.Session), clean(p.ReplyID), clean(p.ID), clean(p.Name), clean(p.Kind), age(now.Sub(p.Created)), clean(input))
	}
	_ = tw.Flush()
}

// age is d, rounded down, in at most two units: 42s, 5m07s, 3h02m, 2d04h.
func age(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// inputText is a call's input as compact JSON on one line; "{}" when absent.
func inputText(in json.RawMessage) string {
	if len(in) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if json.Compact(&b, in) != nil {
		return strings.Join(strings.Fields(string(in)), " ")
	}
	return b.String()
}

// matching returns the calls of calls with call id id, narrowed to replyID
// and tool when they are not ""; none is a not_parked *bus.Error saying
// where they were looked for (session, "" for every session).
func matching(calls []bus.ParkedCall, session, id, replyID, tool string) ([]bus.ParkedCall, error) {
	found := slices.DeleteFunc(slices.Clone(calls), func(p bus.ParkedCall) bool {
		return p.ID != id || replyID != "" && p.ReplyID != replyID || tool != "" && p.Name != tool
	})
	if len(found) > 0 {
		return found, nil
	}
	what := ""
	if replyID != "" {
		what += " of reply " + replyID
	}
	if tool != "" {
		what += " of tool " + tool
	}
	return nil, bus.Errorf(bus.CodeNotParked, "no call %s%s is parked in %s", id, what, where(session))
}

// where names session in messages; "" is every session.
func where(session string) string {
	if session == "" {
		return "any session"
	}
	return "session " + session
}

// answerTarget says which parked call an answer goes to: --reply and
// --tool, and --session when given.
type answerTarget struct {
	replyID, tool *string
}

// answerFlags adds --reply and --tool to fs.
func answerFlags(fs *flag.FlagSet) answerTarget {
	return answerTarget{replyID: fs.String("reply", "", "reply id of the call's batch (default: looked up with parked.list)"),
		tool: fs.String("tool", "", "tool of the call (default: looked up with parked.list)")}
}

// parse parses the command line: n positional arguments, the first a call
// id (wrong is the error, with the count, for another number), checked
// with the flags.
func (a *answerTarget) parse(fs *flag.FlagSet, args []string, n int, wrong string) (pos []string, err error) {
	if pos, err = parse(fs, args); err != nil {
		return nil, err
	}
	if len(pos) != n {
		return nil, usageError(fs, wrong, len(pos))
	}
	if err := checkID(fs, "call id", pos[0]); err != nil {
		return nil, err
	}
	if *a.replyID != "" {
		if err := checkID(fs, "--reply", *a.replyID); err != nil {
			return nil, err
		}
	}
	if *a.tool != "" && !bus.ValidName(*a.tool) {
		return nil, usageError(fs, "--tool %q must match ^[A-Za-z0-9_-]{1,64}$", *a.tool)
	}
	return pos, nil
}

// resolve connects and returns the parked call to answer: from the flags
// when --session, --reply and --tool are given, unless lookup says to look
// it up anyway (a call not listed is then as the flags say), else found
// with parked.list (in every session without --session). A call found
// there must be of kind; not finding it is an answerError.
func (a *answerTarget) resolve(ctx context.Context, fs *flag.FlagSet, cn *conn, id, kind string, lookup bool) (*client.Client, bus.ParkedCall, error) {
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return nil, bus.ParkedCall{}, err
	}
	session := "" // every session: the call id finds its session
	if cli.Given(fs, "session") {
		session = cn.session
	}
	flags := bus.ParkedCall{Session: session, ReplyID: *a.replyID, ID: id, Name: *a.tool, Kind: kind}
	given := session != "" && *a.replyID != "" && *a.tool != ""
	if given && !lookup {
		return cl, flags, nil
	}
	// Call ids a batch's model gave are unique in practice, so session may
	// be "" (every session); finding several asks for --session or --reply.
	calls, err := listParked(ctx, cl, session)
	if err != nil {
		return nil, bus.ParkedCall{}, answerError(id, err)
	}
	found, err := matching(calls, session, id, *a.replyID, *a.tool)
	if errors.Is(err, bus.ErrNotParked) && given {
		return cl, flags, nil // the router refuses it precisely
	}
	if err != nil {
		return nil, bus.ParkedCall{}, answerError(id, err)
	}
	if len(found) > 1 {
		places := make([]string, len(found))
		sessions := map[string]bool{}
		for i, p := range found {
			places[i] = "session " + p.Session + " reply " + p.ReplyID + " (" + p.Name + ")"
			sessions[p.Session] = true
		}
		pick := "--reply"
		if len(sessions) > 1 {
			pick = "--session (and --reply if needed)"
		}
		return nil, bus.ParkedCall{}, answerError(id, fmt.Errorf("call id %s is ambiguous: it is parked in %s; pick one with %s",
			id, strings.Join(places, ", "), pick))
	}
	if p := found[0]; p.Kind != kind {
		return nil, p, answerError(id, fmt.Errorf("call %s of %s is parked for %s, not %s: use %s", id, p.Name, kindText(p.Kind), kindText(kind), nextCommand(p, false)))
	}
	return cl, found[0], nil
}

func kindText(kind string) string {
	if kind == bus.KindConfirm {
		return "a confirmation"
	}
	return "its external result"
}

// answerError explains an answer that was not accepted; a refusal names
// its code (not_parked, already_answered, bad_request ...).
func answerError(id string, err error) error {
	if _, ok := errors.AsType[*bus.Error](err); ok {
		return fmt.Errorf("answer to call %s refused: %w", id, err)
	}
	return fmt.Errorf("answer to call %s: %w", id, err)
}

func runAnswer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("answer", stderr)
	target := answerFlags(fs)
	failed := fs.Bool("error", false, "answer with state error: the output says why the tool failed")
	pos, err := target.parse(fs, args, 2, "answer takes a call id and the output, got %d arguments")
	if err != nil {
		return err
	}
	id := pos[0]
	if !utf8.ValidString(pos[1]) {
		// JSON would turn the bytes into U+FFFD: the handler's answer would
		// not be what it said.
		return usageError(fs, "the output is not UTF-8 text; send binary data as a data block with base64 data")
	}
	cl, p, err := target.resolve(ctx, fs, cn, id, bus.KindExternal, false)
	if err != nil {
		return err
	}
	a := bus.Answer{State: bus.StateSuccess, Output: parseOutput(pos[1])}
	if *failed {
		a.State = bus.StateError
	}
	if err := cl.Parked().Answer(ctx, p.Name, p.Session, p.ReplyID, id, a); err != nil {
		return answerError(id, err)
	}
	fmt.Fprintln(stdout, clean(fmt.Sprintf("answered call %s of %s (reply %s, session %s): %s", id, p.Name, p.ReplyID, p.Session, a.State)))
	return nil
}

// parseOutput reads an answer's output: a JSON array of blocks, else one
// text block holding s as it is.
func parseOutput(s string) []bus.Block {
	if t := strings.TrimSpace(s); !strings.HasPrefix(t, "[") {
		return bus.Text(s)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var blocks []bus.Block
	if dec.Decode(&blocks) != nil || dec.Decode(&struct{}{}) != io.EOF ||
		slices.ContainsFunc(blocks, func(b bus.Block) bool { return b.Type == "" }) {
		return bus.Text(s)
	}
	if blocks == nil {
		blocks = []bus.Block{}
	}
	return blocks
}

func runConfirm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("confirm", stderr)
	target := answerFlags(fs)
	deny := fs.Bool("deny", false, "refuse the call: it ends denied")
	remember := fs.Bool("remember", false, "add the call's suggested rules to the session, so such calls run without asking")
	input := fs.String("input", "", "run the call with this JSON input instead (validated again; sent on P.answer.<tool>, which only an open router takes for a confirmation)")
	pos, err := target.parse(fs, args, 1, "confirm takes a call id, got %d arguments")
	if err != nil {
		return err
	}
	id := pos[0]
	if *deny && *input != "" {
		return usageError(fs, "--input edits a call that runs; it cannot go with --deny")
	}
	if *deny && *remember {
		return usageError(fs, "--remember adds rules that allow such calls; it cannot go with --deny")
	}
	if *input != "" && !json.Valid([]byte(*input)) {
		return usageError(fs, "--input %q is not JSON", *input)
	}
	// Looked up even with --reply and --tool, for the input's digest.
	cl, p, err := target.resolve(ctx, fs, cn, id, bus.KindConfirm, true)
	if err != nil {
		return err
	}
	confirmed := !*deny
	a := bus.Answer{Confirmed: &confirmed, InputDigest: p.InputDigest}
	if *input != "" {
		a.Input = json.RawMessage(*input)
	}
	if *remember {
		if len(p.SuggestedRules) == 0 {
			return fmt.Errorf("call %s of %s has no suggested rules to remember (no rule can allow it); confirm it without --remember", id, p.Name)
		}
		a.Rules = p.SuggestedRules
	}
	send := cl.Parked().Confirm // P.approve.<tool>, the approver's subject
	if *input != "" {
		send = cl.Parked().Answer // an edit: P.answer.<tool>, which only an open router takes
	}
	if err := send(ctx, p.Name, p.Session, p.ReplyID, id, a); err != nil {
		return answerError(id, err)
	}
	verb := "confirmed"
	if *deny {
		verb = "denied"
	}
	line := fmt.Sprintf("%s call %s of %s (reply %s, session %s)", verb, id, p.Name, p.ReplyID, p.Session)
	if len(a.Rules) > 0 {
		line += "; remembered: " + rulesText(a.Rules)
	}
	fmt.Fprintln(stdout, clean(line))
	return nil
}

// maxHistory bounds the calls parked --history prints (the newest).
const maxHistory = 1000

// parkedHistory returns the call records of session ("" for all) that no
// longer wait, newest last, from the parked bucket (kept 7 days), with who
// answered, when, and the result's state.
func parkedHistory(ctx context.Context, cl *client.Client, session string) ([]bus.ParkRecord, error) {
	js, err := jetstream.New(cl.Conn())
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, cl.Subjects().Bucket(bus.BucketParked))
	if err != nil {
		return nil, fmt.Errorf("parked --history: %w", err)
	}
	filter := "*.*.*"
	if session != "" {
		filter = session + ".*.*"
	}
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("parked --history: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []bus.ParkRecord
	for e := range w.Updates() {
		if e == nil {
			break // the current values are in
		}
		var r bus.ParkRecord
		if json.Unmarshal(e.Value(), &r) != nil || r.Status == bus.ParkParked {
			continue
		}
		out = append(out, r)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	slices.SortFunc(out, func(a, b bus.ParkRecord) int { return a.Created.Compare(b.Created) })
	return out[max(len(out)-maxHistory, 0):], nil
}

// renderHistory prints the records as a table.
func renderHistory(w io.Writer, recs []bus.ParkRecord) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tREPLY\tCALL\tTOOL\tKIND\tSTATUS\tRESULT\tANSWERED BY\tANSWERED AT")
	for _, r := range recs {
		res, at := "-", "-"
		if r.Result != nil {
			res = r.Result.State
		}
		if !r.AnsweredAt.IsZero() {
			at = r.AnsweredAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(r.Session), clean(r.ReplyID), clean(r.Call.ID), clean(r.Call.Name), clean(r.Kind), clean(string(r.Status)), clean(res), clean(orDash(r.AnsweredBy)), at)
	}
	_ = tw.Flush()
}
