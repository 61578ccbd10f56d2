package client

import (
	"context"
	"fmt"

	"github.com/toolbus/toolbus/bus"
)

// Parked is the side of docs/protocol.md section 6 that answers parked
// calls: a handler or approver follows the handoff requests (Follow, 6.2)
// and answers them (Answer on P.answer.<tool>, Confirm on
// P.approve.<tool>, 6.3); an agent answers its own questions the same
// way. Client.Parked returns it; it is a value, cheap to make and safe
// for concurrent use.
type Parked struct{ c *Client }

// Parked returns the Client's handle on parked calls.
func (c *Client) Parked() Parked { return Parked{c} }

// Answer answers a parked call of tool: an external call's result, or a
// confirmation. It returns nil when the answer was accepted, else a
// *bus.Error (bus.ErrNotParked, bus.ErrAlreadyAnswered, ...). An output
// above Config.InlineLimit (or the payload limit) is stored in the outputs
// object store and sent as references; one above Config.MaxOutput is
// refused with a *offload.TooLargeError-wrapping error and nothing is sent.
func (p Parked) Answer(ctx context.Context, tool, session, replyID, callID string, a bus.Answer) error {
	c := p.c
	if len(a.Output) > 0 {
		if !bus.ValidID(session) || !bus.ValidID(replyID) || !bus.ValidID(callID) {
			return bus.Errorf(bus.CodeBadEvent, "an answer needs valid session, reply and call ids")
		}
		out, err := c.off.Fit(ctx, bus.CallKey(session, replyID, callID), a.Output, 0, a.State == bus.StateError)
		if err != nil {
			return fmt.Errorf("client: answer of %s: %w", callID, err)
		}
		a.Output = out
	}
	return c.rq.sendAnswer(ctx, c.subj.Handoffs.Answer(tool), session, replyID, callID, a, "answer")
}

// Confirm answers a call parked for a confirmation on P.approve.<tool>,
// the approver's subject (docs/protocol.md 6.3): a.Confirmed, the parked
// input's a.InputDigest (from the confirm request or parked.list; the
// router refuses another with "input changed") and optionally a.Rules
// among the call's suggested_rules. An edited a.Input is refused there; an
// open router still takes one through Answer on P.answer.<tool>.
func (p Parked) Confirm(ctx context.Context, tool, session, replyID, callID string, a bus.Answer) error {
	c := p.c
	return c.rq.sendAnswer(ctx, c.subj.Handoffs.Approve(tool), session, replyID, callID, a, "confirmation")
}
