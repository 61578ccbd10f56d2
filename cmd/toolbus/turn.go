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
	if *replyID == "" {
		*replyID = client.NewReplyID()
	} else if !bus.ValidID(*replyID) {
		return usageError(fs, "--reply-id %q must match ^[A-Za-z0-9_-]{1,128}$", *replyID)
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
	reply, err := cl.Call(ctx, cn.session, turn.Batch(), client.WithReplyID(*replyID))
	if err != nil {
		return err
	}
	out, err := turn.Reply(reply.Results, reply.Parked)
	if err != nil {
		return err
	}
	return writeJSON(stdout, struct {
		Messages []json.RawMessage `json:"messages"`
		Parked   []bus.Parked      `json:"parked"`
		ReplyID  string            `json:"reply_id"`
	}{Messages: out.Messages, Parked: out.Parked, ReplyID: *replyID})
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
