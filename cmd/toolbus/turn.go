package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

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
	if err := checkSession(fs, cn.session); err != nil {
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
	cl, closeConn, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	batch := turn.Batch()
	var fol *follower
	if *wait {
		var stop func()
		if fol, stop, err = follow(ctx, cl, cn.session, *replyID, len(batch.Calls), stderr); err != nil {
			return err
		}
		defer stop()
	}
	reply, err := cl.Call(ctx, cn.session, batch, client.WithReplyID(*replyID))
	if err != nil {
		return err
	}
	results, parked := reply.Results, reply.Parked
	for _, p := range parked {
		fmt.Fprintf(stderr, "call %s of %s parked, waiting for %s: %s\n", p.ID, p.Name, kindText(p.Kind), parkedCommand(p))
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
