package router

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/tracing"
)

// resolveStep resolves a batch's calls and validates their inputs.
type resolveStep struct {
	// resolve says what a call's name runs in a session (groups, registry
	// and skills); refresh reads a tool from KV (registry.Registry.Refresh).
	resolve func(sess *groups.Session, req *groups.Request, user json.RawMessage, name string) groups.Resolved
	refresh func(ctx context.Context, name string) error
	health  *store.Health // an unavailable tool while the store is full says so
	log     *slog.Logger
}

// from resolves the calls of b from index i on that have no result yet in
// sess, b's session; an unknown or unavailable tool is read from KV and
// resolved again.
func (s resolveStep) from(b *batch, sess *groups.Session, i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var missing []string
	for _, c := range b.calls[i:] {
		if c.result == nil {
			s.one(b, sess, c)
			if code := c.target.Code; (code == bus.CodeUnknownTool || code == bus.CodeUnavailable) &&
				bus.ValidName(c.call.Name) && !slices.Contains(missing, c.call.Name) {
				missing = append(missing, c.call.Name)
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	for _, name := range missing {
		if err := s.refresh(ctx, name); err != nil {
			s.log.Warn("router: tool not read from KV", "tool", name, "err", err)
		}
	}
	sess = b.p.sessions.Session(b.session)
	for _, c := range b.calls[i:] {
		if c.result == nil && slices.Contains(missing, c.call.Name) {
			s.one(b, sess, c)
		}
	}
}

// one finds what c runs and validates its input (else: its early result).
func (s resolveStep) one(b *batch, sess *groups.Session, c *callState) {
	c.target = s.resolve(sess, b.req, b.data.User, c.call.Name)
	c.input, c.early = validate(c.call, c.target)
	if c.early != nil && c.target.Code == bus.CodeUnavailable && s.health != nil {
		c.early = storeFullOr(c.call, s.health, c.early)
	}
}

// validate checks a call's input against its tool's schema, or fails the call.
func validate(c bus.Call, t groups.Resolved) (json.RawMessage, *bus.Result) {
	if t.Code != "" {
		return nil, new(bus.ErrorResult(c, t.Code, t.Message))
	}
	var schema *schemas.Schema
	switch {
	case t.Tool != nil:
		schema = t.Tool.Schema
	case t.External != nil:
		schema = t.External.Schema
	}
	input, problems, err := schemas.CheckInput(c.Input, schema)
	if err != nil {
		d := bus.Detail{Path: "/", Message: err.Error()}
		return nil, new(bus.ErrorResult(c, bus.CodeInvalidInput, schemas.InvalidInputMessage(c.Name, []bus.Detail{d}), d))
	}
	if len(problems) > 0 {
		return nil, new(bus.ErrorResult(c, bus.CodeInvalidInput, schemas.InvalidInputMessage(c.Name, problems), problems...))
	}
	return input, nil
}

// parkSpec says how a call parks; the zero value means it runs.
type parkSpec struct {
	kind          string
	requestScoped bool
	reason        string // why it asks
	rule          string // why the engine decided as it did: the audit record's rule
	suggested     []bus.Rule
}

// decide applies the permission engine to a resolved, validated call: a
// result for a denied call, a parkSpec for one that waits, or neither.
func decide(pc permission.Context, t groups.Resolved, c bus.Call, input json.RawMessage) (parkSpec, *bus.Result) {
	switch {
	case t.Reset, t.Skill, t.Search, t.Read:
		return parkSpec{}, nil
	case t.External != nil:
		return parkSpec{kind: bus.KindExternal, requestScoped: true}, nil
	}
	def := &t.Tool.Def
	d := permission.Decide(pc, def, input)
	switch d.Behavior {
	case permission.Deny:
		return parkSpec{rule: d.Reason}, new(bus.ErrorResult(c, bus.CodeDenied,
			fmt.Sprintf("PermissionDeniedError: The tool '%s' may not run: %s.", def.Name, d.Reason)))
	case permission.Ask:
		return parkSpec{kind: bus.KindConfirm, reason: d.Reason, rule: d.Reason, suggested: d.SuggestedRules}, nil
	}
	if def.External {
		return parkSpec{kind: bus.KindExternal, rule: d.Reason}, nil
	}
	return parkSpec{rule: d.Reason}, nil
}

func permissionContext(s *groups.Session) permission.Context {
	return permission.Context{Mode: s.Mode, Rules: s.Rules, WorkDirs: s.WorkDirs}
}

// nextRun returns the end of the run that starts at call i (docs/protocol.md
// 5.2): a maximal stretch of concurrency-safe calls, or one unsafe call.
func nextRun(i, n int, safe func(k int) bool) int {
	j := i + 1
	if safe(i) {
		for j < n && safe(j) {
			j++
		}
	}
	return j
}

// Unknown names the configuration's unknown pinned, quota and group names
// now (groups.Store.Unknown); cmd/router warns of them once at start.
func (r *Router) Unknown() []string { return r.groups.Unknown(r.reg) }

// storeFullOr is res, a call's "No live worker" result, unless the store
// is full, refusing the heartbeats too (docs/protocol.md 3.3).
func storeFullOr(c bus.Call, h *store.Health, res *bus.Result) *bus.Result {
	full, why, _ := h.Full()
	if !full {
		return res
	}
	r := bus.ErrorResult(c, bus.CodeInternal, fmt.Sprintf(
		"InternalError: %s: no live worker of tool '%s' can be seen while JetStream refuses the workers' heartbeats (%s); it did not run. Call it again once the operator has freed space.", store.FullText, c.Name, why))
	return &r
}

// turn is a checked batch: one model turn's calls and their attributes.
type turn struct {
	session  string
	replyID  string
	trace    [2]string // traceparent, tracestate
	expiry   string
	deadline time.Time // from expirytime; zero when absent
	data     bus.Batch
	req      *groups.Request
}

// checkTurn checks a decoded io.toolbus.call.batch whose data is read
// (nil: read from e, its calls into calls when they fit). Errors are
// bad_event or bad_request.
func checkTurn(e *bus.Event, lim Limits, calls []bus.Call, read *bus.Batch) (turn, error) {
	if !bus.ValidID(e.ID) {
		return turn{}, bus.Errorf(bus.CodeBadEvent, "id (the reply id) %q must match ^[A-Za-z0-9_-]{1,128}$", e.ID)
	}
	data := read
	if data == nil {
		data = new(bus.Batch)
		if err := data.FromEventInto(e, calls); err != nil {
			return turn{}, err
		}
	}
	n := len(data.Calls)
	if n == 0 {
		return turn{}, bus.Errorf(bus.CodeBadRequest, "the batch has no calls")
	}
	if n > lim.MaxCalls {
		return turn{}, bus.Errorf(bus.CodeBadRequest, "the batch has %d calls; at most %d are allowed", n, lim.MaxCalls)
	}
	switch data.Events {
	case "", bus.EventsBatch, bus.EventsCalls:
	default:
		return turn{}, bus.Errorf(bus.CodeBadRequest, "events %q must be \"batch\" (the default) or \"calls\"", data.Events)
	}
	// Duplicates among a few calls need no map (an allocation).
	var seen map[string]struct{}
	if n > 8 {
		seen = make(map[string]struct{}, n)
	}
	for i, c := range data.Calls {
		if !bus.ValidID(c.ID) {
			return turn{}, bus.Errorf(bus.CodeBadEvent, "call id %q must match ^[A-Za-z0-9_-]{1,128}$", c.ID)
		}
		if dupCall(data.Calls[:i], seen, c.ID) {
			return turn{}, bus.Errorf(bus.CodeBadRequest, "call id %q appears twice in the batch", c.ID)
		}
		if len(c.Input) > lim.MaxInputBytes {
			return turn{}, bus.Errorf(bus.CodeBadRequest, "call %s: its input is %d bytes; at most %d are allowed", c.ID, len(c.Input), lim.MaxInputBytes)
		}
		if seen != nil {
			seen[c.ID] = struct{}{}
		}
	}
	tp, ts := tracing.Bound(e.TraceParent, e.TraceState)
	return newTurn(e.SessionID, e.ID, [2]string{tp, ts}, e.ExpiryTime, *data)
}

// checkAsked enforces that only a bridge parks a bridged server's question
// (docs/protocol.md 12, 1.17): a batch on P.ask.<session> (ask) is
// external_only and calls only its request-scoped mcp__<server>__elicit
// tools, and a batch on P.call.<session> declares no request-scoped tool
// of that name. Only a batch on P.ask has a reply id with bus.AskPrefix
// (1.18), so none is a copy of a batch of the other subject, and its parks
// say "asked" wherever they are listed. Errors are bad_request.
func checkAsked(t turn, ask bool) error {
	if ask != bus.AskedReply(t.replyID) {
		if ask {
			return bus.Errorf(bus.CodeBadRequest, "reply id %s: a question on P.ask.%s has a reply id starting with %s", t.replyID, t.session, bus.AskPrefix)
		}
		return bus.Errorf(bus.CodeBadRequest, "reply id %s: a reply id starting with %s is a bridge's question's, asked on P.ask.%s, never a call batch's; use another reply id", t.replyID, bus.AskPrefix, t.session)
	}
	if !ask {
		for _, x := range t.req.External {
			if bus.QuestionTool(x.Def.Name) {
				return bus.Errorf(bus.CodeBadRequest, "request-scoped tool %s: a bridged server's question (mcp__<server>__elicit) is asked by a bridge on P.ask.%s, never in a call batch", x.Def.Name, t.session)
			}
		}
		return nil
	}
	if t.req.Mode != bus.MergeExternalOnly {
		return bus.Errorf(bus.CodeBadRequest, "a question on P.ask.%s must be an external_only batch, not %s", t.session, t.req.Mode)
	}
	for _, x := range t.req.External {
		if !bus.QuestionTool(x.Def.Name) {
			return bus.Errorf(bus.CodeBadRequest, "request-scoped tool %s is not a bridged server's question tool (mcp__<server>__elicit), the only tools asked on P.ask.%s", x.Def.Name, t.session)
		}
	}
	for _, c := range t.data.Calls {
		if !slices.ContainsFunc(t.req.External, func(x *groups.RequestTool) bool { return x.Def.Name == c.Name }) {
			return bus.Errorf(bus.CodeBadRequest, "call %s of %s: a question on P.ask.%s calls only its request-scoped mcp__<server>__elicit tools", c.ID, c.Name, t.session)
		}
	}
	return nil
}

// dupCall reports whether id is among the calls before it (seen, or before).
func dupCall(before []bus.Call, seen map[string]struct{}, id string) bool {
	if seen != nil {
		_, dup := seen[id]
		return dup
	}
	return slices.ContainsFunc(before, func(c bus.Call) bool { return c.ID == id })
}

// newTurn builds a turn from checked parts.
func newTurn(session, replyID string, trace [2]string, expiry string, data bus.Batch) (turn, error) {
	t := turn{session: session, replyID: replyID, trace: trace, expiry: expiry, data: data}
	if expiry != "" {
		d, err := time.Parse(time.RFC3339Nano, expiry)
		if err != nil {
			return turn{}, bus.Errorf(bus.CodeBadEvent, "expirytime %q is not RFC 3339", expiry)
		}
		t.deadline = d
	}
	var err error
	if t.req, err = groups.CheckRequest(data.Request); err != nil {
		return turn{}, err
	}
	return t, nil
}

// Identities binds sessions to the toolbus users whose credentials alone
// may publish in them (docs/security.md "Identities"; security.Bindings).
type Identities interface {
	// UserOf returns the toolbus user session is bound to, if bound.
	UserOf(session string) (user string, bound bool)
	// OwnAgent reports whether session has an agent login of its own (1.13).
	OwnAgent(session string) bool
}

// sharedAgents reports whether session is the shared agent's (no login of
// its own) on a router with identities (docs/security.md).
func sharedAgents(ids Identities, session string) bool {
	if ids == nil {
		return false
	}
	_, bound := ids.UserOf(session)
	return !bound && !ids.OwnAgent(session)
}

// identify returns the user a batch or tools.query of session runs as
// (docs/protocol.md 3.1): the claim on an open router, else the bound
// user's; another claim is a denied *bus.Error.
func identify(ids Identities, session string, claimed json.RawMessage) (json.RawMessage, error) {
	if ids == nil {
		return claimed, nil
	}
	user, bound := ids.UserOf(session)
	none := userOf(claimed) == ""
	switch {
	case bound && (none || isString(claimed) && userOf(claimed) == user):
		b, _ := json.Marshal(user)
		return b, nil
	case bound:
		return nil, bus.Errorf(bus.CodeDenied, "user %s is not the one that connected: session %s is bound to user %q by its credentials; send no user, or that one", compact(claimed), session, user)
	case none:
		return nil, nil
	}
	return nil, bus.Errorf(bus.CodeDenied, "user %s needs a credential: session %s is bound to no user (bind one with `toolbus security agent --session %s --user <user>`), so its batches run as no user; send none",
		compact(claimed), session, session)
}

func isString(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil
}

// compact is a claim as an error message quotes it, bounded.
func compact(raw json.RawMessage) string {
	s := userOf(raw)
	if isString(raw) {
		s = fmt.Sprintf("%q", s)
	}
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
