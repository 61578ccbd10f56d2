package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// maxTurnInput bounds the assistant message read from stdin or a file.
const maxTurnInput = 64 << 20

// runTurn reads one assistant message of a model API, runs its tool calls
// as one batch and prints the tool-result messages that API expects next
// (client.ParseModelTurn, client.ModelTurn.Reply).
func runTurn(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("turn", stderr)
	format := fs.String("format", bus.FormatOpenAI, "the API of the message: openai, openai-responses, anthropic or gemini")
	in := fs.String("in", "-", "file holding the assistant message (or the API's whole response); - is standard input")
	replyID := fs.String("reply-id", "", "reply id of the batch; re-sending one is deduplicated (default: a fresh id)")
	wait := fs.Bool("wait", false, "when calls park, print progress and wait for their answers, then print the whole turn's messages (without it: the messages of the calls done, the parked calls, exit status 3)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError(fs, "turn takes no arguments (the message comes from --in or standard input)")
	}
	if err := checkID(fs, "--session", cn.session); err != nil {
		return err
	}
	if *replyID, err = replyIDFlag(fs, *replyID); err != nil {
		return err
	}
	msg, err := readInput(*in, os.Stdin)
	if err != nil {
		return err
	}
	turn, err := client.ParseModelTurn(*format, msg)
	if err != nil {
		return err
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	batch := turn.Batch()
	fol, stop, err := follow(ctx, cl, cn.session, *replyID, len(batch.Calls), stderr, *wait)
	if err != nil {
		return err
	}
	defer stop()
	reply, err := cl.Call(ctx, cn.session, batch, client.WithReplyID(*replyID))
	if err != nil {
		return err
	}
	results, parked := reply.Results, reply.Parked
	for _, p := range parked {
		fmt.Fprintf(stderr, "call %s of %s parked, waiting for %s: %s\n", p.ID, p.Name, kindText(p.Kind), nextCommand(bus.ParkedCall{ID: p.ID, Name: p.Name, Kind: p.Kind}, false))
	}
	if *wait && len(parked) > 0 {
		fmt.Fprintf(stderr, "waiting for %d parked call(s)...\n", len(parked))
		late, err := fol.await(ctx, parked)
		if err != nil {
			return err
		}
		results, parked = append(results, late...), nil
	}
	out, err := turn.Reply(results, parked)
	if err != nil {
		return err
	}
	if out.Messages == nil {
		out.Messages = []json.RawMessage{}
	}
	if err := writeJSON(stdout, struct {
		Messages []json.RawMessage `json:"messages"`
		Parked   []bus.Parked      `json:"parked"`
		ReplyID  string            `json:"reply_id"`
	}{Messages: out.Messages, Parked: out.Parked, ReplyID: *replyID}); err != nil {
		return err
	}
	if len(out.Parked) > 0 {
		return &parkedError{n: len(out.Parked)}
	}
	return nil
}

// readInput reads name ("-" for stdin), at most maxTurnInput bytes.
func readInput(name string, stdin io.Reader) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxTurnInput+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTurnInput {
		return nil, fmt.Errorf("the message is larger than %d bytes", maxTurnInput)
	}
	return b, nil
}

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
	// parked hands the calls of call.parked events to await, which prints
	// only those whose kind differs from what the reply already said, so
	// a call's parking is told once (the reply and the event both carry it).
	parked chan bus.Parked
	w      io.Writer
	// A confirmed call of an external tool parks again for its answer with
	// no event of its own (docs/protocol.md 3.4: call.parked once per
	// batch), so await lists the reply's parked calls every pollEvery
	// (poll) and says when a call's kind changed.
	cl               *client.Client
	session, replyID string
}

// pollEvery is how often a wait looks at the parked calls.
const pollEvery = 2 * time.Second

// follow watches session's events and follows batch replyID in them,
// before the batch is sent, so that no result is missed; calls is the
// batch's size (at most one result each, so the hand-over never blocks).
// stop ends the watch. Without wait (no --wait) it follows nothing.
func follow(ctx context.Context, cl *client.Client, session, replyID string, calls int, w io.Writer, wait bool) (f *follower, stop func(), err error) {
	if !wait {
		return nil, func() {}, nil
	}
	events, err := cl.Watch(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	f = &follower{results: make(chan bus.Result, calls+16), parked: make(chan bus.Parked, calls+16), w: w,
		cl: cl, session: session, replyID: replyID}
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
						select {
						case f.parked <- c:
						default: // only the news is lost; await also polls
						}
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
	return f, func() { _ = events.Stop(context.WithoutCancel(ctx)) }, nil
}

// await returns the results of the parked calls, in the order they come.
func (f *follower) await(ctx context.Context, parked []bus.Parked) ([]bus.Result, error) {
	waiting := make(map[string]bool, len(parked))
	kinds := make(map[string]string, len(parked))
	for _, p := range parked {
		waiting[p.ID] = true
		kinds[p.ID] = p.Kind
	}
	// moved prints a waiting call whose parked kind changed since it was
	// last seen (a confirmation given, the call now waits for its answer).
	moved := func(p bus.ParkedCall) {
		if waiting[p.ID] && kinds[p.ID] != p.Kind {
			kinds[p.ID] = p.Kind
			fmt.Fprintf(f.w, "call %s of %s now waits for %s: %s\n", p.ID, p.Name, kindText(p.Kind), nextCommand(p, false))
		}
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var out []bus.Result
	for len(waiting) > 0 {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-tick.C:
			for _, p := range f.poll(ctx) {
				moved(p)
			}
		case p := <-f.parked:
			moved(bus.ParkedCall{ID: p.ID, Name: p.Name, Kind: p.Kind})
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

// poll lists the reply's parked calls; a listing that fails only loses the
// news (the result still comes as an event).
func (f *follower) poll(ctx context.Context) []bus.ParkedCall {
	ctx, cancel := context.WithTimeout(ctx, pollEvery)
	defer cancel()
	_, calls, _ := listParked(ctx, f.cl, f.session)
	return slices.DeleteFunc(calls, func(p bus.ParkedCall) bool { return p.ReplyID != f.replyID })
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
