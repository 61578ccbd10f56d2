package facade

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// Choices of the confirmation put to the host's user.
const (
	choiceAllow       = "allow"
	choiceAllowAlways = "allow and remember"
	choiceDeny        = "deny"
)

// canElicit reports whether the client of ctx declared elicitation (in
// 2026-07-28, in the request's _meta).
func canElicit(ctx context.Context) bool {
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		return info.ClientCapabilities != nil && info.ClientCapabilities.Elicitation != nil
	}
	s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	return ok && s.GetClientCapabilities().Elicitation != nil
}

// mayElicit reports whether a confirm park of a call of this session is
// put to the host's user: only under ConfirmHostUser, and only when the
// client declared elicitation. Under ConfirmApprovers the host is never
// asked (the call parks for the approvers), so a host's user cannot
// confirm at all; under ConfirmHostUser it confirms only the call its own
// request started (that call's reply id and park), in a session its
// identity may use, as its own user: never another user's call.
func (c *confirmer) mayElicit(ctx context.Context) bool {
	return c.policy == ConfirmHostUser && canElicit(ctx)
}

// confirmer owns a session's confirmations put to the host's user
// (docs/mcp.md "Who confirms"): the elicitation up to 2025-11-25, and the
// 2026-07-28 multi round-trip, whose calls wait for the retry in pending
// here and in the request states of the facade's bucket (state.go).
type confirmer struct {
	bus           confirmBus
	session, user string
	policy        Confirm
	// remember: the host's user may choose "allow and remember". A rule
	// is the session's, for every user of it, so only an unauthenticated
	// facade (stdio, insecure loopback: one desktop user) offers it; an
	// authenticated host user confirms one call at a time.
	remember bool
	// closing ends when the facade closes; loop runs a goroutine the
	// facade owns (life.Loop).
	closing context.Context
	loop    func(func(context.Context)) bool
	states  stateStore
	// await waits for a call's result on the bus (awaitResult); run runs
	// a call (caller.run).
	await func(ctx context.Context, session, replyID, callID string) (*bus.Result, error)
	run   func(ctx context.Context, req mcp.CallToolRequest, o runOpts) (*mcp.CallToolResult, error)
	log   *slog.Logger

	mu      sync.Mutex
	pending map[string]*pending // request state → a call waiting for the host user's decision
}

// confirmBus is what a confirmation needs of the bus (client.Client).
type confirmBus interface {
	Confirm(ctx context.Context, tool, session, replyID, callID string, a bus.Answer) error
}

// stateStore keeps the 2026-07-28 request states (kvStore, state.go).
type stateStore interface {
	putState(ctx context.Context, id string, r *stateRecord) error
	getState(ctx context.Context, session, user, id string) (*stateRecord, error)
	deleteState(ctx context.Context, session, user, id string)
}

var (
	_ confirmBus = (*client.Client)(nil)
	_ stateStore = (*kvStore)(nil)
)

// busy reports whether a call waits for the host user's decision: the
// session's MCP server is not dropped then.
func (c *confirmer) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) > 0
}

// confirmPark is a confirm park of a call, with the call's reply id.
type confirmPark struct {
	p        bus.Parked
	replyID  string
	callID   string
	started  time.Time // when the call was sent
	deadline time.Time // how long it is waited for
}

// pending is a call of a 2026-07-28 client that was asked for the host
// user's decision (multi round-trip: the tools/call returned
// input_required) and goes on meanwhile, until the retry brings the
// decision, someone else answers, or its deadline passes.
type pending struct {
	park   confirmPark
	cancel context.CancelFunc
	done   chan struct{}
	res    *mcp.CallToolResult
	err    error
}

// callModern runs a call of a 2026-07-28 client that declared
// elicitation. Server-initiated requests are gone in that revision, so a
// confirm park returns an input_required result asking for the decision,
// with a request state naming the call, which goes on in the background;
// the client's retry (resume) answers the park with the decision and
// waits for the result.
func (c *confirmer) callModern(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unlink := context.AfterFunc(c.closing, cancel) // Close ends it too
	confirm := make(chan confirmPark, 1)
	p := &pending{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer unlink()
		defer cancel()
		// keep: a facade that closes leaves the call parked; the retry,
		// wherever it lands, answers it (state.go).
		p.res, p.err = c.run(rctx, req, runOpts{confirm: confirm, keep: true})
	}()
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		cancel()
		<-p.done
		return nil, ctx.Err()
	case park := <-confirm:
		p.park = park
		state := newID()
		// Stored, so that a retry reaching another facade process is
		// answered there (state.go); without the bucket, this process
		// still answers it.
		if err := c.states.putState(ctx, state, &stateRecord{Session: c.session, User: c.user, Tool: req.Params.Name, CallID: park.callID,
			ReplyID: park.replyID, Park: park.p, Started: park.started, Deadline: park.deadline,
			Expires: park.deadline.Add(resultKept)}); err != nil {
			c.log.Warn("facade: request state kept in this process only", "err", err)
		}
		c.mu.Lock()
		c.pending[state] = p
		c.mu.Unlock()
		// A call that ended (answered by someone else, or past its
		// deadline) keeps its result for the retry a while.
		c.loop(func(context.Context) {
			<-p.done
			select {
			case <-time.After(resultKept):
				// The stored state goes too; a retry after this is refused.
				dctx, cancel := context.WithTimeout(c.closing, 10*time.Second)
				c.states.deleteState(dctx, c.session, c.user, state)
				cancel()
			case <-c.closing.Done():
				// Closing: the stored state stays for another process.
			}
			c.mu.Lock()
			delete(c.pending, state)
			c.mu.Unlock()
		})
		return server.NewInputRequestBuilder(state).Elicit("confirm", confirmParams(park.p, c.remember)).ToolResult(), nil
	}
}

// resume is the retry of a call that asked for the host user's decision:
// the decision answers the park (the first answer wins), and the call's
// result is waited for.
func (c *confirmer) resume(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c.mu.Lock()
	p := c.pending[req.Params.RequestState]
	c.mu.Unlock()
	if p == nil {
		return c.resumeStored(ctx, req)
	}
	if r, ok := req.Params.InputResponses["confirm"]; ok && c.policy == ConfirmHostUser {
		if err := r.DecodeFor(mcp.MethodElicitationCreate); err == nil && r.Elicitation != nil {
			c.decide(ctx, p.park.p, p.park.replyID, r.Elicitation)
		}
	}
	select {
	case <-p.done:
		c.mu.Lock()
		delete(c.pending, req.Params.RequestState)
		c.mu.Unlock()
		return p.res, p.err
	case <-ctx.Done():
		p.cancel()
		<-p.done
		return nil, ctx.Err()
	}
}

// resultKept is how long the result of a call that asked for a decision
// waits for the client's retry once the call has ended.
const resultKept = time.Minute

// confirmParams is the elicitation that asks the host's user about p;
// "allow and remember" is offered only when remember (confirmer.remember).
func confirmParams(p bus.Parked, remember bool) mcp.ElicitationParams {
	choices := []string{choiceAllow, choiceDeny}
	if remember {
		choices = []string{choiceAllow, choiceAllowAlways, choiceDeny}
	}
	return mcp.ElicitationParams{Message: fmt.Sprintf("Allow the tool %s to run with input %s?", p.Name, p.Input),
		RequestedSchema: map[string]any{"type": "object", "required": []string{"decision"},
			"properties": map[string]any{"decision": map[string]any{"type": "string", "title": "Decision",
				"enum": choices}}}}
}

// confirm asks the host's user about a confirm park through elicitation
// and answers the park with the choice: allow, allow and remember (a rule
// allowing the tool in this session), or deny. A decline or cancel leaves
// the park for other approvers; an answer that comes second is ignored,
// the first answer from anywhere wins.
func (c *confirmer) confirm(ctx context.Context, p bus.Parked, replyID string) {
	req := mcp.ElicitationRequest{Params: confirmParams(p, c.remember)}
	res, err := server.ServerFromContext(ctx).RequestElicitation(ctx, req)
	if err != nil {
		return
	}
	c.decide(ctx, p, replyID, res)
}

// decide answers the park with the host user's choice; a decline, a
// cancel or an unknown choice leaves it to the others.
func (c *confirmer) decide(ctx context.Context, p bus.Parked, replyID string, res *mcp.ElicitationResult) {
	if res.Action != mcp.ElicitationResponseActionAccept {
		return
	}
	content, _ := res.Content.(map[string]any)
	decision, _ := content["decision"].(string)
	if decision != choiceAllow && decision != choiceAllowAlways && decision != choiceDeny {
		return
	}
	yes := decision == choiceAllow || decision == choiceAllowAlways
	// Bound to the exact input the host's user saw (docs/protocol.md 6.3).
	a := bus.Answer{Confirmed: &yes, InputDigest: bus.InputDigest(p.Input)}
	if decision == choiceAllowAlways && c.remember {
		a.Rules = p.SuggestedRules
	}
	if err := c.bus.Confirm(ctx, p.Name, c.session, replyID, p.ID, a); err != nil {
		c.log.Debug("facade: elicited answer not taken", "tool", p.Name, "err", err)
	}
}
