package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
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
	cl, closeConn, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	defer closeConn()
	var events *client.Events
	if *replay {
		events, err = cl.Replay(ctx, cn.session)
	} else {
		events, err = cl.Watch(ctx, cn.session)
	}
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
	return printEvents(ctx, stdout, events.C, line)
}

// printEvents prints one line per event until ctx ends (nil) or the stream
// closes on its own (an error).
func printEvents(ctx context.Context, w io.Writer, events <-chan *bus.Event, line func(*bus.Event) ([]byte, error)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("the event stream ended")
			}
			b, err := line(e)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
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
			res.ToolCallID = r.ID
			res.Type = bus.TypeCallResult // rendered as a result
			raw, err := json.Marshal(r)
			if err != nil {
				continue
			}
			res.Data = raw
			out += "\n" + strings.Replace(eventLine(&res, withSession), bus.TypeCallResult, bus.TypeBatchDone, 1)
		}
	}
	return out
}
