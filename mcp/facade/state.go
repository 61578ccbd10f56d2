package facade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// stateRecord is the request state of a 2026-07-28 call waiting for the
// host user's decision (an input_required result), stored under
// r.<session>.<user digest>.<state> in the facade's bucket: the client's
// retry may reach any facade process, which answers the park and waits
// for the call's result on the bus. The state the client holds is 128
// random bits and names nothing by itself; the key is made from the
// retry's own session and user, so a state of another session or user,
// a forged or an expired one, finds nothing and is refused.
type stateRecord struct {
	Session  string     `json:"session"`
	User     string     `json:"user"`
	Tool     string     `json:"tool"`
	CallID   string     `json:"call_id"`
	ReplyID  string     `json:"reply_id"`
	Park     bus.Parked `json:"park"`
	Started  time.Time  `json:"started"`
	Deadline time.Time  `json:"deadline"` // how long the call is waited for
	Expires  time.Time  `json:"expires"`  // the state is refused after this
}

func stateKey(session, user, id string) string {
	return "r." + session + "." + userDigest(user) + "." + id
}

// putState stores a request state.
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

// deleteState forgets a request state (best effort: it expires anyway).
func (st *kvStore) deleteState(ctx context.Context, session, user, id string) {
	if kv, err := st.bucket(ctx); err == nil {
		_ = kv.Delete(ctx, stateKey(session, user, id))
	}
}

// getState returns the (session, user)'s live request state id; another
// session's or user's, a forged or an expired one is errNotFound.
func (st *kvStore) getState(ctx context.Context, session, user, id string) (*stateRecord, error) {
	if !idPattern.MatchString(id) {
		return nil, errNotFound
	}
	kv, err := st.bucket(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, stateKey(session, user, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoStore, err)
	}
	var r stateRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil || r.Session != session || r.User != user || time.Now().After(r.Expires) {
		return nil, errNotFound
	}
	return &r, nil
}

// resumeStored is the retry of a call another facade process (or this
// one, before a restart) asked the host user about: the decision answers
// the park on the bus (the first answer wins), and the call's result is
// waited for on the bus until the call's deadline.
func (c *confirmer) resumeStored(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	r, err := c.states.getState(ctx, c.session, c.user, req.Params.RequestState)
	if errors.Is(err, errNotFound) {
		return mcp.NewToolResultError(fmt.Sprintf("The request state %q names no call of this session and user waiting for a decision: "+
			"it ended (answered elsewhere, or past its deadline), or it was never given here.", req.Params.RequestState)), nil
	}
	if err != nil {
		return mcp.NewToolResultError("Error: " + err.Error()), nil
	}
	if in, ok := req.Params.InputResponses["confirm"]; ok && c.policy == ConfirmHostUser {
		if err := in.DecodeFor(mcp.MethodElicitationCreate); err == nil && in.Elicitation != nil {
			c.decide(ctx, r.Park, r.ReplyID, in.Elicitation)
		}
	}
	wctx, cancel := context.WithDeadline(ctx, r.Deadline)
	defer cancel()
	res, err := c.await(wctx, c.session, r.ReplyID, r.CallID)
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return mcp.NewToolResultError(stillParkedText(r.CallID, r.Tool, r.Park.Kind, r.Park.Subject, r.ReplyID, c.session)), nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return mcp.NewToolResultError("Error: " + err.Error()), nil
	}
	return toMCP(*res), nil
}
