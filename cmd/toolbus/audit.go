package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/audit"
)

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
	session := ""
	if sessionGiven(fs) {
		if err := checkSession(fs, cn.session); err != nil {
			return err
		}
		session = cn.session
	}
	cl, closeConn, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	js, err := jetstream.New(cl.Conn())
	if err != nil {
		return err
	}
	f := audit.Filter{Session: session, Tool: *tool}
	if *since > 0 {
		f.Since = time.Now().Add(-*since)
	}
	var tw *tabwriter.Writer
	if !*asJSON {
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
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
		by := r.Decision.Approver
		if by == "" {
			by = "-"
		}
		out := r.Outcome.State
		if r.Outcome.Code != "" {
			out += " " + r.Outcome.Code
		}
		if r.Suppressed > 0 {
			out += fmt.Sprintf(" (+%d refusals not recorded)", r.Suppressed)
		}
		_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.Time.Format(time.RFC3339), r.Session, orDash(r.CallID), orDash(r.Tool), r.User, r.Decision.Behavior, by, out, r.DurationMS)
		return err
	})
	if err != nil {
		return err
	}
	if tw != nil {
		return tw.Flush()
	}
	return nil
}

// sessionGiven reports whether --session was set on the command line:
// without it the export covers every session.
func sessionGiven(fs *flag.FlagSet) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "session" })
	return given
}
