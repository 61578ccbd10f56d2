package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("watch", stderr)
	fs.Lookup("session").Usage = `session id, or "*" for every session`
	replay := fs.Bool("replay", false, "print the events the events stream still keeps first, then live ones")
	asJSON := fs.Bool("json", false, "print each event as one line of JSON (the CloudEvent as sent), for jq and scripts")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(fs, "watch takes no arguments, got %q", pos[0])
	}
	all := cn.session == "*"
	if !all {
		if err := checkSession(fs, cn.session); err != nil {
			return err
		}
	}
	cl, closeConn, err := cn.dial(ctx)
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
	defer events.Stop()
	fmt.Fprintf(stderr, "watching %s (Ctrl-C to stop)\n", cl.Subjects().Events(cn.session))
	line := func(e *bus.Event) ([]byte, error) { return []byte(eventLine(e, all)), nil }
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
