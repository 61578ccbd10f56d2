package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// callID is the id of the one call a `toolbus call` batch holds; it is fixed
// so that re-sending with the same --reply-id is deduplicated.
const callID = "call_1"

// cancelGrace bounds sending the cancel of an interrupted call, and is the
// time the router is given past --timeout to report the timeout itself.
const cancelGrace = 3 * time.Second

func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("call", stderr)
	replyID := fs.String("reply-id", "", "reply id of the batch; re-sending one is deduplicated (default: a fresh id)")
	timeout := fs.Duration("timeout", 0, "deadline of the call (its expirytime); 0 means the tool's own timeout")
	asJSON := fs.Bool("json", false, "print the reply (or the rejection) as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageError(fs, "call takes a tool name and an optional JSON input, got %d arguments", len(pos))
	}
	tool, input := pos[0], "{}"
	if len(pos) == 2 {
		input = pos[1]
	}
	if !bus.ValidName(tool) {
		return usageError(fs, "tool name %q must match ^[A-Za-z0-9_-]{1,64}$", tool)
	}
	if !json.Valid([]byte(input)) {
		return usageError(fs, "input %q is not JSON", input)
	}
	if err := checkSession(fs, cn.session); err != nil {
		return err
	}
	if *replyID == "" {
		*replyID = client.NewReplyID()
	} else if !bus.ValidID(*replyID) {
		return usageError(fs, "--reply-id %q must match ^[A-Za-z0-9_-]{1,128}$", *replyID)
	}
	if *timeout < 0 {
		return usageError(fs, "--timeout must not be negative")
	}

	cl, closeConn, err := cn.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	opts := []client.CallOption{client.WithReplyID(*replyID)}
	callCtx := ctx
	if *timeout > 0 {
		opts = append(opts, client.WithExpiry(time.Now().Add(*timeout)))
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, *timeout+cancelGrace)
		defer cancel()
	}
	batch := bus.Batch{Calls: []bus.Call{{ID: callID, Name: tool, Input: json.RawMessage(input)}}}
	reply, err := cl.Call(callCtx, cn.session, batch, opts...)
	if err != nil {
		return callError(ctx, cl, cn.session, *replyID, err, *asJSON, stdout)
	}
	if *asJSON {
		if err := writeJSON(stdout, reply); err != nil {
			return err
		}
	} else {
		renderReply(stdout, reply)
	}
	return replyError(reply)
}

// callError explains a call that got no reply. A rejected batch is a
// *bus.Error (printed as JSON with asJSON); when the user interrupted the
// command, the calls of the reply are cancelled on the bus too.
func callError(ctx context.Context, cl *client.Client, session, replyID string, err error, asJSON bool, stdout io.Writer) error {
	var be *bus.Error
	if errors.As(err, &be) {
		if asJSON {
			_ = writeJSON(stdout, be)
		}
		return fmt.Errorf("batch rejected: %s: %s", be.Code, be.Message)
	}
	if ctx.Err() != nil {
		cctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		defer cancel()
		if cerr := cl.Cancel(cctx, session, replyID); cerr != nil {
			return fmt.Errorf("interrupted; cancelling reply %s failed: %w", replyID, cerr)
		}
		return fmt.Errorf("interrupted; the calls of reply %s were cancelled", replyID)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no reply for reply %s in time: %w", replyID, err)
	}
	return err
}

// replyError returns an error naming every result that is not a success.
// Parked calls are not errors: they wait for an answer.
func replyError(r *bus.Reply) error {
	var errs []error
	for _, res := range r.Results {
		if res.State == bus.StateSuccess {
			continue
		}
		code := ""
		if res.Error != nil {
			code = " (" + res.Error.Code + ")"
		}
		errs = append(errs, fmt.Errorf("call %s of %s ended %s%s", res.ID, res.Name, res.State, code))
	}
	return errors.Join(errs...)
}
