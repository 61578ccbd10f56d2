package facade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// kindQuestion marks a request state asking a bridged server's question.
const kindQuestion = "question"

// stateRecord is the request state of a 2026-07-28 call waiting for its
// host's user (rounds.go), stored under r.<session>.<user digest>.<state>
// in the facade's bucket, so any facade process takes the retry. The key
// is made from the retry's own session and user, so a state of another
// session or user, a forged or an expired one, finds nothing.
type stateRecord struct {
	Session string     `json:"session"`
	User    string     `json:"user"`
	Tool    string     `json:"tool"`
	CallID  string     `json:"call_id"`
	ReplyID string     `json:"reply_id"`
	Park    bus.Parked `json:"park"`
	// Kind is kindQuestion for a bridged server's question (AskReplyID:
	// the bridge's batch that parked it); "" for a confirmation.
	Kind       string    `json:"kind,omitempty"`
	AskReplyID string    `json:"ask_reply_id,omitempty"`
	Started    time.Time `json:"started"`
	Deadline   time.Time `json:"deadline"` // how long the call is waited for
	Expires    time.Time `json:"expires"`  // the state is refused after this
}

func stateKey(session, user, id string) string {
	return "r." + session + "." + userDigest(user) + "." + id
}

func (st *kvStore) putState(ctx context.Context, id string, r *stateRecord) error {
	kv, err := st.bucket(ctx)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(r)
	if _, err := store.Create(ctx, kv, stateKey(r.Session, r.User, id), raw, store.Bounded); err != nil {
		return fmt.Errorf("%w: %v", errNoStore, err)
	}
	return nil
}

func (st *kvStore) deleteState(ctx context.Context, session, user, id string) {
	if kv, err := st.bucket(ctx); err == nil {
		_ = kv.Delete(ctx, stateKey(session, user, id))
	}
}

// getState returns the (session, user)'s live request state id, else
// errNotFound.
func (st *kvStore) getState(ctx context.Context, session, user, id string) (*stateRecord, error) {
	if !idPattern.MatchString(id) {
		return nil, errNotFound
	}
	raw, err := st.get(ctx, stateKey(session, user, id))
	if err != nil {
		return nil, err
	}
	var r stateRecord
	if err := json.Unmarshal(raw, &r); err != nil || r.Session != session || r.User != user || time.Now().After(r.Expires) {
		return nil, errNotFound
	}
	return &r, nil
}

// resumeStored is the retry of a call another facade process (or this
// one, before a restart) asked its host about: the answer is published,
// and the call is waited for on the bus until its deadline: its result,
// or its bridged server's next question, the next round.
func (c *confirmer) resumeStored(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	r, err := c.states.getState(ctx, c.session, c.user, req.Params.RequestState)
	if errors.Is(err, errNotFound) {
		return unknownState(req.Params.RequestState), nil
	}
	if err != nil {
		return mcp.NewToolResultError("Error: " + err.Error()), nil
	}
	_, hold := c.holds(ctx, req)
	wctx, cancel := context.WithDeadline(ctx, earliest(r.Deadline, time.Now().Add(hold)))
	defer cancel()
	// Watch before answering, so the question the answer leads to is seen.
	next, err := c.questions.watchCall(wctx, r.Tool, r.CallID)
	if err != nil {
		c.log.Warn("facade: a bridged server's questions of this call are left to the bus", "tool", r.Tool, "err", err)
	}
	a := ask{confirm: &confirmPark{p: r.Park, replyID: r.ReplyID, callID: r.CallID, started: r.Started, deadline: r.Deadline}}
	if r.Kind == kindQuestion {
		qn, ok := questionOf(r.Park, r.Tool, r.CallID, c.user)
		if !ok {
			return unknownState(req.Params.RequestState), nil
		}
		a = ask{question: &asked{p: r.Park, replyID: r.AskReplyID, q: qn}}
	}
	c.answer(ctx, a, req.Params.InputResponses)
	type awaited struct {
		res *bus.Result
		err error
	}
	done := make(chan awaited, 1)
	go func() {
		res, err := c.await(wctx, c.session, r.ReplyID, r.CallID)
		done <- awaited{res, err}
	}()
	for {
		select {
		case q := <-next:
			if !hostCan(ctx, ask{question: &q}) {
				continue
			}
			base := *r
			base.Kind, base.AskReplyID = "", ""
			state, nr, res := c.newRound(ctx, base, ask{question: &q})
			if err := c.states.putState(ctx, state, nr); err != nil {
				return mcp.NewToolResultError("Error: " + err.Error()), nil
			}
			c.forget(req.Params.RequestState)
			cancel()
			<-done
			return res, nil
		case d := <-done:
			if d.err == nil {
				return toMCP(*d.res), nil
			}
			if ctx.Err() != nil {
				// The host gave the retry up: at 2026-07-28 that cancels
				// the call (docs/mcp.md "Interop").
				if interruptOnEnd(true, c.closing) {
					interrupt(ctx, c.cancel, c.session, r.ReplyID)
				}
				return nil, ctx.Err()
			}
			if wctx.Err() != nil && r.Kind == kindQuestion {
				return mcp.NewToolResultError(stillRunningText(*r, c.session)), nil
			}
			if wctx.Err() != nil {
				return mcp.NewToolResultError(stillParkedText(r.CallID, r.Tool, r.Park.Kind, r.Park.Subject, r.ReplyID, c.session)), nil
			}
			return mcp.NewToolResultError("Error: " + d.err.Error()), nil
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
