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

// elicitation is the elicitation capability the client of ctx declared
// (in 2026-07-28, in the request's _meta); nil when it declared none.
func elicitation(ctx context.Context) *mcp.ElicitationCapability {
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		if info.ClientCapabilities == nil {
			return nil
		}
		return info.ClientCapabilities.Elicitation
	}
	if s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
		return s.GetClientCapabilities().Elicitation
	}
	return nil
}

// canElicitURL reports whether the client of ctx declared URL-mode
// elicitation.
func canElicitURL(ctx context.Context) bool {
	e := elicitation(ctx)
	return e != nil && e.URL != nil
}

// mayElicit reports whether a confirm park of a call of this session is
// put to the host's user: only under ConfirmHostUser, when the client
// declared elicitation. The host's user then confirms only the call its
// own request started, as its own user: never another user's call.
func (c *confirmer) mayElicit(ctx context.Context) bool {
	return c.policy == ConfirmHostUser && elicitation(ctx) != nil
}

// confirmer owns a session's confirmations put to the host's user
// (docs/mcp.md "Who confirms"): the elicitation up to 2025-11-25, and the
// 2026-07-28 multi round trip (rounds.go).
type confirmer struct {
	bus           client.Parked
	session, user string
	policy        Confirm
	// remember: the host's user may choose "allow and remember". A rule
	// is the session's, for every user of it, so only an unauthenticated
	// facade (stdio, insecure loopback: one desktop user) offers it; an
	// authenticated host user confirms one call at a time.
	remember bool
	closing  context.Context                                                                            // ends when the facade closes
	loop     func(func(context.Context)) bool                                                           // life.Loop
	states   *kvStore                                                                                   // the request states (rounds.go)
	await    func(ctx context.Context, session, replyID, callID string) (*bus.Result, error)            // awaitResult
	run      func(ctx context.Context, req mcp.CallToolRequest, o runOpts) (*mcp.CallToolResult, error) // caller.run
	log      *slog.Logger

	questions *relayer
	cancel    func(ctx context.Context, session, replyID string, calls ...string) error        // P.cancel
	holds     func(ctx context.Context, req mcp.CallToolRequest) (call, request time.Duration) // caller.holds

	mu      sync.Mutex
	pending map[string]*round // request state → a call waiting for its host (rounds.go)
}

// busy reports whether a call waits for the host user (the session's MCP
// server is not dropped then).
func (c *confirmer) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) > 0
}

// confirmPark is a confirm park of a call.
type confirmPark struct {
	p                 bus.Parked
	replyID, callID   string
	started, deadline time.Time
}

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
// and answers the park with the choice (decide).
func (c *confirmer) confirm(ctx context.Context, p bus.Parked, replyID string) {
	req := mcp.ElicitationRequest{Params: confirmParams(p, c.remember)}
	res, err := server.ServerFromContext(ctx).RequestElicitation(ctx, req)
	if err != nil {
		return
	}
	c.decide(ctx, p, replyID, res)
}

// decide answers the park with the host user's choice: allow, allow and
// remember (a rule allowing the tool in this session), or deny; a
// decline, a cancel or an unknown choice leaves it to the others. The
// first answer from anywhere wins.
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
