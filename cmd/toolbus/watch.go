package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/mcp/facade"
)

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("watch", stderr)
	fs.Lookup("session").Usage = `session id, or "*" for every session`
	cn.anySession = true
	replay := fs.Bool("replay", false, "print the events the events stream still keeps first, then live ones")
	asJSON := fs.Bool("json", false, "print each event as one line of JSON (the CloudEvent as sent), for jq and scripts")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	all := cn.session == allSessions
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	watch := cl.Watch
	if *replay {
		watch = cl.Replay
	}
	events, err := watch(ctx, cn.session)
	if err != nil {
		return err
	}
	defer func() { _ = events.Stop(context.WithoutCancel(ctx)) }()
	fmt.Fprintf(stderr, "watching %s (Ctrl-C to stop)\n", cl.Subjects().Events(cn.session))
	var lines watchLines
	line := func(e *bus.Event) ([]byte, error) { return []byte(lines.of(e, all)), nil }
	if *asJSON {
		line = (*bus.Event).Encode
	}
	return printEvents(ctx, stdout, events.C, line, errors.New("the event stream ended"))
}

// printEvents prints one line per event (none for a nil line) until ctx
// ends (nil) or the stream closes on its own (ended).
func printEvents(ctx context.Context, w io.Writer, events <-chan *bus.Event, line func(*bus.Event) ([]byte, error), ended error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return ended
			}
			b, err := line(e)
			if err != nil {
				return err
			}
			if b == nil {
				continue // not one to print
			}
			if _, err := fmt.Fprintf(w, "%s\n", cleanLines(string(b))); err != nil {
				return err
			}
		}
	}
}

// watchLines renders events for `toolbus watch`. A batch whose results came
// back in its reply stores only batch.done (docs/protocol.md 3.4), so after
// batch.done's summary each result that had no call.result of its own gets
// a line of its own, in the call.result line's form under batch.done's type.
type watchLines struct {
	seen map[string]bool // reply/call of the call.result events printed
}

// maxWatchSeen bounds watchLines.seen; past it the memory starts afresh
// (a result may then be printed twice, never lost).
const maxWatchSeen = 4096

func (l *watchLines) of(e *bus.Event, withSession bool) string {
	out := eventLine(e, withSession)
	switch e.Type {
	case bus.TypeCallResult:
		if l.seen == nil || len(l.seen) >= maxWatchSeen {
			l.seen = map[string]bool{}
		}
		l.seen[e.ReplyID+"/"+e.ToolCallID] = true
	case bus.TypeBatchDone:
		var d bus.BatchDone
		if e.DataAs(&d) != nil {
			break
		}
		for _, r := range d.Results {
			if l.seen[e.ReplyID+"/"+r.ID] {
				delete(l.seen, e.ReplyID+"/"+r.ID)
				continue
			}
			res := *e
			res.ToolCallID, res.Type = r.ID, bus.TypeCallResult // rendered as a result
			res.Data, _ = json.Marshal(r)                       // decoded from JSON just now
			out += "\n" + strings.Replace(eventLine(&res, withSession), bus.TypeCallResult, bus.TypeBatchDone, 1)
		}
	}
	return out
}

// allSessions is the --session of watch and watch-handoff that shows every
// session (conn.anySession).
const allSessions = "*"

func runWatchHandoff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("watch-handoff", stderr)
	sf := fs.Lookup("session")
	sf.Usage = `only the requests of this session; "*" for every session`
	sf.DefValue, cn.session, cn.anySession = allSessions, allSessions, true
	confirm := fs.Bool("confirm", false, "follow the confirmation requests (P.confirm.<tool>) instead of the external ones (P.external.<tool>)")
	asJSON := fs.Bool("json", false, "print each request as one line of CloudEvent JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError(fs, "watch-handoff takes a tool name (or \"*\" for every tool), got %d arguments", len(pos))
	}
	tool := pos[0]
	if tool != "*" && !bus.ValidName(tool) {
		return usageError(fs, "tool name %q must match ^[A-Za-z0-9_-]{1,64}$ (or be \"*\")", tool)
	}
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	kind, subject := "external", cl.Subjects().Handoffs.External(tool)
	if *confirm {
		kind, subject = "confirm", cl.Subjects().Handoffs.Confirm(tool)
	}
	// The router-made consumer delivers every call still parked, oldest
	// first, then new ones; no JetStream permission needed.
	ev, err := cl.Parked().Follow(ctx, kind, strings.TrimPrefix(tool, "*")) // "": every tool
	if err != nil {
		return fmt.Errorf("follow %s: %w", subject, err)
	}
	defer func() { _ = ev.Stop(context.WithoutCancel(ctx)) }()
	fmt.Fprintf(stderr, "following %s, the calls parked in bucket %s, from the oldest (Ctrl-C to stop)\n", subject, cl.Subjects().Bucket(bus.BucketParked))
	// Each request as one line: readable, or the CloudEvent as compact JSON.
	line := func(e *bus.Event) ([]byte, error) {
		switch {
		case cn.session != allSessions && e.SessionID != cn.session:
			return nil, nil
		case *asJSON:
			return json.Marshal(e)
		}
		return []byte(requestLine(e)), nil
	}
	return printEvents(ctx, stdout, ev.C, line, nil)
}

// requestLine is one line of watch-handoff: time, session, reply id, call
// id, tool and input; for a confirmation also the reason it asks and the
// rules --remember would add.
func requestLine(e *bus.Event) string {
	head := []string{eventTime(e), orDash(e.SessionID), orDash(e.ReplyID), orDash(e.ToolCallID)}
	var req bus.HandoffRequest
	if err := e.DataAs(&req); err != nil {
		return strings.Join(append(head, e.Type, short(string(e.Data))), " ")
	}
	line := strings.Join(append(head, orDash(req.Call.Name), inputText(req.Call.Input)), " ")
	if e.Type != bus.TypeConfirmReq {
		return line
	}
	line += " — asks: " + orDash(req.Reason)
	if len(req.SuggestedRules) > 0 {
		line += "; --remember adds: " + rulesText(req.SuggestedRules)
	}
	return line
}

// runInbox serves the approval inbox (docs/inbox.md): a page listing the
// calls that wait across sessions, answered with this command's NATS
// login (the approver's, for confirmations only, or the operator's).
func runInbox(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("inbox", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "host:port of the page; an address other than loopback needs --inbox-token or --inbox-token-file")
	token := fs.String("inbox-token", "", "the page's token (at least 16 characters; default: a random one, printed at start)")
	tokenFile := fs.String("inbox-token-file", "", "FILE whose first line is the page's token")
	approver := fs.Bool("approver", false, "log in as the approver role (--nkey DIR/approver.nk --inbox-prefix _INBOX.approver): confirmations only, the waiting calls polled every second")
	source := fs.String("source", "toolbus/inbox", "who answers, as the parked record's answered_by says (the answers' CloudEvents source)")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	nc, err := cn.connect(ctx)
	if err != nil {
		return err
	}
	r, err := inbox.Open(ctx, nc, *listen, *token, *tokenFile, inbox.Config{Prefix: cn.prefix, Source: *source, Approver: *approver})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // then open pages lose their connection
		defer cancel()
		r.Close(cctx)
	}()
	fmt.Fprintln(stdout, r.Banner())
	<-ctx.Done()
	return nil
}

// runMCP serves the session over stdio for a desktop MCP host. Stdio has no
// authentication: the identity is the NATS login, so it is for a host whose
// user owns those credentials.
func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("mcp", stderr)
	user := fs.String("user", "", "the user of every call and listing; the NATS login, not this, decides what the host may publish")
	confirm := fs.String("confirm", string(facade.ConfirmHostUser), "who confirms calls: host_user (the host's elicitation) or approvers (never the host)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	policy, err := facade.ParseConfirm(*confirm)
	if err != nil {
		return err
	}
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	f := facade.New(cl, facade.Config{Confirm: policy})
	defer func() { _ = f.Drain(context.WithoutCancel(ctx)) }()
	return f.ServeStdio(ctx, cn.session, *user, os.Stdin, stdout)
}
