package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/cli"
)

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("cancel", stderr)
	wait := fs.Duration("wait", 3*time.Second, "how long to wait for the cancelled calls to report before saying nothing was cancelled")
	pos, err := parseList(fs, args, "cancel needs a reply id", bus.ValidID, "id %q must match ^[A-Za-z0-9_-]{1,128}$")
	if err != nil {
		return err
	}
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	replyID, calls := pos[0], pos[1:]
	session, err := cancelSession(ctx, cl, fs, cn, replyID)
	if err != nil {
		return err
	}
	// The cancel itself is fire-and-forget (docs/protocol.md 3.5: an
	// unknown reply id is a no-op), so watch for the interrupted results
	// to tell the user whether anything was cancelled.
	events, err := cl.Watch(ctx, session)
	if err != nil {
		return err
	}
	defer func() { _ = events.Stop(context.WithoutCancel(ctx)) }()
	if err := cl.Cancel(ctx, session, replyID, calls...); err != nil {
		return err
	}
	ended, err := awaitInterrupted(ctx, events, replyID, calls, *wait)
	if err != nil {
		return err
	}
	if len(ended) == 0 {
		return fmt.Errorf("nothing was cancelled: no call of reply %s in session %s was running or parked (within %v); check the reply id and --session", replyID, session, *wait)
	}
	fmt.Fprintf(stdout, "cancelled: %s of reply %s in session %s\n", strings.Join(ended, ", "), replyID, session)
	return nil
}

// cancelSession is the session of reply replyID: --session when given,
// else the one session where a call of the reply is parked, else (a
// running call, which no list shows) the default session.
func cancelSession(ctx context.Context, cl *client.Client, fs *flag.FlagSet, cn *conn, replyID string) (string, error) {
	if cli.Given(fs, "session") {
		return cn.session, nil
	}
	_, parked, err := listParked(ctx, cl, "")
	if err != nil {
		return cn.session, nil // a role that may not list: cancel as before
	}
	var sessions []string
	for _, p := range parked {
		if p.ReplyID == replyID && !slices.Contains(sessions, p.Session) {
			sessions = append(sessions, p.Session)
		}
	}
	switch len(sessions) {
	case 0:
		return cn.session, nil
	case 1:
		return sessions[0], nil
	}
	return "", fmt.Errorf("reply id %s is ambiguous: calls of it are parked in sessions %s; pick one with --session", replyID, strings.Join(sessions, ", "))
}

// awaitInterrupted collects the calls of replyID (of calls, or any) that
// end interrupted, until all of calls have or wait passes with none new.
func awaitInterrupted(ctx context.Context, events *client.Events, replyID string, calls []string, wait time.Duration) ([]string, error) {
	want := make(map[string]bool, len(calls))
	for _, c := range calls {
		want[c] = true
	}
	var ended []string
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ended, ctx.Err()
		case <-timer.C:
			return ended, nil
		case e, ok := <-events.C:
			if !ok {
				return ended, nil
			}
			if e.ReplyID != replyID {
				continue
			}
			if e.Type == bus.TypeBatchDone { // it carries every result of the batch
				var done bus.BatchDone
				if e.DataAs(&done) == nil {
					for _, r := range done.Results {
						if r.State == bus.StateInterrupted && (len(calls) == 0 || slices.Contains(calls, r.ID)) && !slices.Contains(ended, r.ID) {
							ended = append(ended, r.ID)
						}
					}
				}
				return ended, nil
			}
			var r bus.Result
			if e.Type != bus.TypeCallResult || e.DataAs(&r) != nil || r.State != bus.StateInterrupted || (len(want) > 0 && !want[r.ID]) {
				continue
			}
			ended = append(ended, r.ID)
			delete(want, r.ID)
			if len(calls) > 0 && len(want) == 0 {
				return ended, nil
			}
			timer.Reset(wait) // more may follow
		}
	}
}
