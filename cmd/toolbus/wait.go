package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// Exit statuses of toolbus (toolbus help): 0 done, every call succeeded;
// 1 an error, a usage error or a call that did not succeed; 3 nothing
// failed but calls are still parked; 130 a second interrupt.
const exitParked = 3

// parkedError ends call and turn when calls are still parked, waiting for
// an answer or a confirmation: not a failure, but not done either.
type parkedError struct{ n int }

func (e *parkedError) Error() string {
	return fmt.Sprintf("%d call(s) parked, waiting for an answer or a confirmation (the commands above give it; --wait waits for it); exit status %d", e.n, exitParked)
}

// ExitCode is the exit status cli.Main uses.
func (e *parkedError) ExitCode() int { return exitParked }

// follower follows one reply's events while a command waits: it prints
// each call's progress and, for each call that parks (again), the command
// that answers it, to w; it hands the call.result events to await.
type follower struct {
	results chan bus.Result
}

// follow starts following replyID on events; calls is the batch's size
// (at most one result each, so the hand-over never blocks).
func follow(events *client.Events, replyID string, calls int, w io.Writer) *follower {
	f := &follower{results: make(chan bus.Result, calls+16)}
	go func() {
		defer close(f.results)
		for e := range events.C {
			if e.ReplyID != replyID {
				continue
			}
			switch e.Type {
			case bus.TypeCallProgress:
				var p bus.Progress
				if e.DataAs(&p) == nil {
					fmt.Fprintf(w, "progress %s #%d: %s\n", e.ToolCallID, p.Seq, blocksText(p.Output))
				}
			case bus.TypeCallParked:
				var p bus.ParkedEvent
				if e.DataAs(&p) == nil {
					for _, c := range p.Calls {
						fmt.Fprintf(w, "call %s of %s now waits for %s: %s\n", c.ID, c.Name, kindText(c.Kind), parkedCommand(c))
					}
				}
			case bus.TypeCallResult:
				var r bus.Result
				if e.DataAs(&r) == nil {
					select {
					case f.results <- r:
					default: // more results than calls: not ours to wait for
					}
				}
			}
		}
	}()
	return f
}

// await returns the results of the parked calls, in the order they come.
func (f *follower) await(ctx context.Context, parked []bus.Parked) ([]bus.Result, error) {
	waiting := make(map[string]bool, len(parked))
	for _, p := range parked {
		waiting[p.ID] = true
	}
	var out []bus.Result
	for len(waiting) > 0 {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case r, ok := <-f.results:
			if !ok {
				return out, errors.New("the event subscription ended")
			}
			if waiting[r.ID] {
				delete(waiting, r.ID)
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// parkedCommand is the toolbus command that answers parked call p.
func parkedCommand(p bus.Parked) string {
	return nextCommand(bus.ParkedCall{ID: p.ID, Name: p.Name, Kind: p.Kind}, false)
}

// blocksText is the text of blocks on one line ([kind] for others).
func blocksText(blocks []bus.Block) string {
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, strings.Join(strings.Fields(b.Text), " "))
		} else {
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return strings.Join(parts, " ")
}
