package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
)

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
	cl, closeConn, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	defer closeConn()
	kind, subject := "external", bus.NewSubjects(cn.prefix).Handoffs.External(tool)
	if *confirm {
		kind, subject = "confirm", bus.NewSubjects(cn.prefix).Handoffs.Confirm(tool)
	}
	forTool := tool
	if tool == "*" {
		forTool = ""
	}
	// A router's consumer delivers every call still parked, oldest first,
	// then what parks: the record is the request until it is answered or
	// expires, so this shows what was asked while nobody watched.
	// The router makes it and relays the pulls (P.handoff.<kind>[.<tool>]),
	// so handlers and approvers need no JetStream permission.
	ev, err := cl.Parked().Follow(ctx, kind, forTool)
	if err != nil {
		return fmt.Errorf("follow %s: %w", subject, err)
	}
	defer func() { _ = ev.Stop(context.WithoutCancel(ctx)) }()
	fmt.Fprintf(stderr, "following %s, the calls parked in bucket %s, from the oldest (Ctrl-C to stop)\n", subject, bus.NewSubjects(cn.prefix).Bucket(bus.BucketParked))
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-ev.C:
			if !ok {
				return nil
			}
			if cn.session != allSessions && e.SessionID != cn.session {
				continue
			}
			if err := printRequest(stdout, e, *asJSON); err != nil {
				return err
			}
		}
	}
}

// printRequest prints a handoff request as one line: readable, or the
// CloudEvent as compact JSON.
func printRequest(w io.Writer, e *bus.Event, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintln(w, requestLine(e))
	return err
}

// requestLine is one line of watch-handoff: time, session, reply id, call
// id, tool and input; for a confirmation also the reason it asks and the
// rules --remember would add.
func requestLine(e *bus.Event) string {
	at := e.Time
	if t, err := time.Parse(time.RFC3339Nano, e.Time); err == nil {
		at = t.Local().Format("2006-01-02 15:04:05.000")
	}
	var req bus.HandoffRequest
	if err := e.DataAs(&req); err != nil {
		return strings.Join([]string{at, orDash(e.SessionID), orDash(e.ReplyID), orDash(e.ToolCallID), e.Type, short(string(e.Data))}, " ")
	}
	line := strings.Join([]string{at, orDash(e.SessionID), orDash(e.ReplyID), orDash(e.ToolCallID),
		orDash(req.Call.Name), inputText(req.Call.Input)}, " ")
	if e.Type != bus.TypeConfirmReq {
		return line
	}
	line += " — asks: " + orDash(req.Reason)
	if len(req.SuggestedRules) > 0 {
		rules := make([]string, len(req.SuggestedRules))
		for i, r := range req.SuggestedRules {
			rules[i] = ruleText(r)
		}
		line += "; --remember adds: " + strings.Join(rules, ", ")
	}
	return line
}
