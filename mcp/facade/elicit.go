package facade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp/bridge"
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

func canElicitURL(ctx context.Context) bool {
	e := elicitation(ctx)
	return e != nil && e.URL != nil
}

// mayElicit reports whether a confirm park of this session's call is put to
// the host's user: under ConfirmHostUser, when the client declared
// elicitation, for the call its own request started only.
func (c *confirmer) mayElicit(ctx context.Context) bool {
	return c.policy == ConfirmHostUser && elicitation(ctx) != nil
}

// confirmer owns a session's confirmations put to the host's user
// (docs/mcp.md "Who confirms"), by elicitation or the multi round trip.
type confirmer struct {
	bus           client.Parked
	session, user string
	policy        Confirm
	// remember offers "allow and remember": a rule is the session's, for
	// all its users, so only an unauthenticated (one desktop user) facade
	// offers it.
	remember bool
	closing  context.Context                                                                            // ends when the facade closes
	loop     func(func(context.Context)) bool                                                           // life.Loop
	states   *kvStore                                                                                   // the request states (stateRecord)
	await    func(ctx context.Context, session, replyID, callID string) (*bus.Result, error)            // awaitResult
	run      func(ctx context.Context, req mcp.CallToolRequest, o runOpts) (*mcp.CallToolResult, error) // caller.run
	log      *slog.Logger

	questions *relayer
	cancel    func(ctx context.Context, session, replyID string, calls ...string) error        // P.cancel
	holds     func(ctx context.Context, req mcp.CallToolRequest) (call, request time.Duration) // caller.holds

	mu      sync.Mutex
	pending map[string]*round // request state → a call waiting for its host
}

// busy: a call waits for the host user (the session is not dropped).
func (c *confirmer) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) > 0
}

// confirmParams is the elicitation that asks the host's user about p;
// "allow and remember" is offered only when remember (confirmer.remember).
func confirmParams(p bus.Parked, remember bool) mcp.ElicitationParams {
	choices := []string{choiceAllow, choiceDeny}
	if remember {
		choices = []string{choiceAllow, choiceAllowAlways, choiceDeny}
	}
	input := "input " + string(p.Input)
	if p.InputOmitted {
		input = "an input too large to show here (" + p.InputDigest + "; toolbus parked shows it)"
	}
	return mcp.ElicitationParams{Message: fmt.Sprintf("Allow the tool %s to run with %s?", p.Name, input),
		RequestedSchema: map[string]any{"type": "object", "required": []string{"decision"},
			"properties": map[string]any{"decision": map[string]any{"type": "string", "title": "Decision",
				"enum": choices}}}}
}

// confirm asks the host's user about a confirm park through elicitation.
func (c *confirmer) confirm(ctx context.Context, p bus.Parked, replyID string) {
	elicit(ctx, ask{Park: p, ReplyID: replyID}, c.remember, c.reply)
}

// elicit puts a to the host of ctx's request (elicitation, when it can show
// it) and gives reply the host's response.
func elicit(ctx context.Context, a ask, remember bool, reply func(context.Context, ask, *mcp.ElicitationResult)) {
	params, ok := a.params(remember, canElicitURL(ctx))
	if !ok {
		return
	}
	if res, err := server.ServerFromContext(ctx).RequestElicitation(ctx, mcp.ElicitationRequest{Params: params}); err == nil && res != nil {
		reply(ctx, a, res)
	}
}

// decide answers the park with the host user's choice: allow, allow and
// remember, or deny; anything else leaves it to the others. The first answer
// from anywhere wins.
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
	// Bound to the exact input the host's user saw (docs/protocol.md 6.3),
	// or was told the digest of, where the park left it out (3.2, 1.19).
	a := bus.Answer{Confirmed: &yes, InputDigest: bus.InputDigest(p.Input)}
	if p.InputOmitted {
		a.InputDigest = p.InputDigest
	}
	if decision == choiceAllowAlways && c.remember {
		a.Rules = p.SuggestedRules
	}
	if err := c.bus.Confirm(ctx, p.Name, c.session, replyID, p.ID, a); err != nil {
		c.log.Debug("facade: elicited answer not taken", "tool", p.Name, "err", err)
	}
}

// The 2026-07-28 multi round trip (docs/mcp.md "Who confirms"): its request
// state is stored (stateRecord), so any facade process serves the retry.

// Input request keys of the two kinds of rounds (inputQuestion also marks
// a request state asking a bridged server's question).
const (
	inputConfirm  = "confirm"
	inputQuestion = "question"
)

// ask is what a call waits on its host for: a confirm park (Question nil)
// or a bridged server's question, with the reply id of the batch that
// parked it (the call's own, or the bridge's). A task's input keeps it.
type ask struct {
	Park     bus.Parked    `json:"park"`
	ReplyID  string        `json:"reply_id"`
	Question *bus.Question `json:"question,omitempty"`
	deadline time.Time     // a confirmation's: how long the call waits for it
}

// key is a's input request key.
func (a ask) key() string {
	if a.Question != nil {
		return inputQuestion
	}
	return inputConfirm
}

// params is the elicitation that puts a to the host (confirmParams,
// questionParams); false when the host cannot show it.
func (a ask) params(remember, url bool) (mcp.ElicitationParams, bool) {
	if a.Question == nil {
		return confirmParams(a.Park, remember), true
	}
	return questionParams(*a.Question, url)
}

// pending is a call of a 2026-07-28 client that asked its host and goes on,
// until it ends (its result kept a while for the retry) or the facade closes.
type pending struct {
	base stateRecord // the call: session, user, tool, ids, start, deadline
	// The next rounds, as the call meets them: its confirm park (runOpts)
	// and its bridged server's questions (relayer.watchCall).
	confirm, questions <-chan ask
	cancel             context.CancelFunc
	done               chan struct{}
	res                *mcp.CallToolResult
	err                error
	state              string // its current request state; guarded by confirmer.mu
}

// round is what one request state of a pending call asked.
type round struct {
	p *pending
	a ask
}

// callModern runs a call of a 2026-07-28 client that declared
// elicitation in the background, on the facade's own context; its first
// round, if one comes before the call ends, is returned as input_required.
func (c *confirmer) callModern(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p := &pending{done: make(chan struct{}), base: stateRecord{Session: c.session, User: c.user, Tool: req.Params.Name,
		CallID: "mcp-" + nuid.Next(), ReplyID: client.NewReplyID(), Started: time.Now()}}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	unlink := context.AfterFunc(c.closing, cancel)
	// Watch before the call is made, so its server's first question is seen.
	questions, err := c.questions.watchCall(rctx, req.Params.Name, p.base.CallID)
	if err != nil {
		c.log.Warn("facade: a bridged server's questions of this call are left to the bus", "tool", req.Params.Name, "err", err)
	}
	confirm := make(chan ask, 1) // run sends at most one
	p.confirm, p.questions = confirm, questions
	go func() {
		defer close(p.done)
		defer unlink()
		defer cancel()
		// keep: the retry, wherever it lands, goes on with the call.
		p.res, p.err = c.run(rctx, req, runOpts{confirm: confirm, keep: true, callID: p.base.CallID, replyID: p.base.ReplyID})
	}()
	res, asked, err := c.waitRound(ctx, p, req, nil, nil)
	if asked {
		c.loop(func(context.Context) { c.keepResult(p) })
	}
	return res, err
}

// waitRound waits for the pending call p: its end, or its next round the
// host can be asked (asked), until ctx ends (the host gave the request
// up: the call is cancelled) or timeout fires (late's result).
func (c *confirmer) waitRound(ctx context.Context, p *pending, req mcp.CallToolRequest, timeout <-chan time.Time,
	late func() *mcp.CallToolResult) (res *mcp.CallToolResult, asked bool, err error) {
	questions := p.questions // a closed stream is no end: the confirm may still come
	for {
		var a ask
		select {
		case <-p.done:
			return p.res, false, p.err
		case <-ctx.Done():
			p.cancel()
			<-p.done
			return nil, false, ctx.Err()
		case <-timeout:
			return late(), false, nil
		case a = <-p.confirm:
		case q, ok := <-questions:
			if !ok {
				questions = nil
				continue
			}
			a = q
		}
		select {
		case <-p.done: // the call ended meanwhile: no round for it
			return p.res, false, p.err
		default:
		}
		if _, ok := a.params(c.remember, canElicitURL(ctx)); ok { // else a URL question this host cannot open: left to the bus
			return c.issue(ctx, p, req, a), true, nil
		}
	}
}

// issue gives the pending call its deadline once it first asks (a call that
// never asks costs no listing for it), makes a's request state its current
// one (stored; without the bucket only this process takes the retry; the
// previous state is refused from now on) and returns the input_required
// result.
func (c *confirmer) issue(ctx context.Context, p *pending, req mcp.CallToolRequest, a ask) *mcp.CallToolResult {
	if c.baseOf(p).Deadline.IsZero() {
		callFor, _ := c.holds(ctx, req)
		c.mu.Lock()
		p.base.Deadline = p.base.Started.Add(callFor)
		c.mu.Unlock()
	}
	state, r, res := c.newRound(ctx, c.baseOf(p), a)
	if err := c.states.putState(ctx, state, r); err != nil {
		c.log.Warn("facade: request state kept in this process only", "err", err)
	}
	c.mu.Lock()
	old := p.state
	p.state = state
	delete(c.pending, old)
	c.pending[state] = &round{p: p, a: a}
	c.mu.Unlock()
	if old != "" {
		c.forget(old)
	}
	return res
}

// newRound is the request state, its record and the input_required
// result of round a of the call base.
func (c *confirmer) newRound(ctx context.Context, base stateRecord, a ask) (string, *stateRecord, *mcp.CallToolResult) {
	r := base
	r.Park = a.Park
	if a.Question != nil {
		r.Kind, r.AskReplyID = inputQuestion, a.ReplyID
	} else {
		r.Deadline = a.deadline
	}
	r.Expires = r.Deadline.Add(resultKept)
	params, _ := a.params(c.remember, canElicitURL(ctx))
	state := newID()
	return state, &r, server.NewInputRequestBuilder(state).Elicit(a.key(), params).ToolResult()
}

func (c *confirmer) baseOf(p *pending) stateRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.base
}

// forget deletes a request state (best effort: it expires anyway).
func (c *confirmer) forget(state string) {
	dctx, cancel := context.WithTimeout(c.closing, 10*time.Second)
	defer cancel()
	c.states.delete(dctx, userKey("r", c.session, c.user, state))
}

// keepResult keeps the result of a call that ended for its retry a
// while, then forgets its request state.
func (c *confirmer) keepResult(p *pending) {
	<-p.done
	closing := bus.Sleep(c.closing, resultKept) != nil
	c.mu.Lock()
	state := p.state
	delete(c.pending, state)
	c.mu.Unlock()
	if !closing { // else the stored state stays for another process
		c.forget(state)
	}
}

// resume is the retry of a call that asked its host: the answer is
// published (the first answer wins), and the call waited for again.
func (c *confirmer) resume(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c.mu.Lock()
	rd := c.pending[req.Params.RequestState]
	c.mu.Unlock()
	if rd == nil {
		return c.resumeStored(ctx, req)
	}
	// A state another process superseded (it served a later round) is
	// gone from the bucket: refused here too.
	if _, err := c.states.getState(ctx, c.session, c.user, req.Params.RequestState); errors.Is(err, errNotFound) {
		return unknownState(req.Params.RequestState), nil
	}
	p := rd.p
	c.answer(ctx, rd.a, req.Params.InputResponses)
	_, hold := c.holds(ctx, req)
	t := time.NewTimer(hold)
	defer t.Stop()
	res, _, err := c.waitRound(ctx, p, req, t.C, func() *mcp.CallToolResult {
		return mcp.NewToolResultError(stillRunningText(c.baseOf(p), c.session))
	})
	return res, err
}

// answer publishes the host's response to round a (reply; a decision only
// under host_user); a missing, malformed or cancelling response publishes
// nothing.
func (c *confirmer) answer(ctx context.Context, a ask, in mcp.InputResponses) {
	if res := server.ElicitationResponse(in, a.key()); res != nil && a.answerable(c.policy) {
		c.reply(ctx, a, res)
	}
}

// answerable reports whether a host under policy may answer a: a bridged
// server's question always, a confirmation under host_user only. A state or
// a task is keyed by session and user, so a credential of the same user
// under approvers may hold one of a host_user host's
// (TestAttackTaskUpdateAcrossPolicies, TestAttackRetryAcrossPolicies).
func (a ask) answerable(policy Confirm) bool { return a.Question != nil || policy == ConfirmHostUser }

// reply publishes the host's response to a: the question's answer
// (P.answer) or the decision (P.confirm).
func (c *confirmer) reply(ctx context.Context, a ask, res *mcp.ElicitationResult) {
	if a.Question != nil {
		c.questions.answerQuestion(ctx, a, res)
		return
	}
	c.decide(ctx, a.Park, a.ReplyID, res)
}

func unknownState(state string) *mcp.CallToolResult {
	return mcp.NewToolResultError(fmt.Sprintf("The request state %q names no call of this session and user waiting for its host: "+
		"it ended (answered elsewhere, or past its deadline), it was superseded by a later one, or it was never given here.", state))
}

// stillRunningText tells the model that the call goes on after its host
// answered, and how its result reaches it.
func stillRunningText(r stateRecord, session string) string {
	return fmt.Sprintf("The call %s of tool %s is still running on the bus (reply id %s, session %s): its result will appear "+
		"in the session's events. Do not call the tool again for this.", r.CallID, r.Tool, r.ReplyID, session)
}

// resultKept is how long the result of a call that asked its host waits
// for the client's retry once the call has ended.
const resultKept = time.Minute

// stateRecord is the request state of a 2026-07-28 call waiting for its
// host's user, under r.<session>.<user digest>.<state>: keyed by the retry's
// own session and user, so another's, a forged or an expired state finds
// nothing.
type stateRecord struct {
	Session string     `json:"session"`
	User    string     `json:"user"`
	Tool    string     `json:"tool"`
	CallID  string     `json:"call_id"`
	ReplyID string     `json:"reply_id"`
	Park    bus.Parked `json:"park"`
	// Kind is inputQuestion for a bridged server's question (AskReplyID:
	// the bridge's batch that parked it); "" for a confirmation.
	Kind       string    `json:"kind,omitempty"`
	AskReplyID string    `json:"ask_reply_id,omitempty"`
	Started    time.Time `json:"started"`
	Deadline   time.Time `json:"deadline"` // how long the call is waited for
	Expires    time.Time `json:"expires"`  // the state is refused after this
}

func (st *kvStore) putState(ctx context.Context, id string, r *stateRecord) error {
	return st.put(ctx, userKey("r", r.Session, r.User, id), r, true)
}

// getState returns the (session, user)'s live request state id, else
// errNotFound.
func (st *kvStore) getState(ctx context.Context, session, user, id string) (*stateRecord, error) {
	if !idPattern.MatchString(id) {
		return nil, errNotFound
	}
	var r stateRecord
	err := st.get(ctx, userKey("r", session, user, id), &r)
	if errors.Is(err, errNoStore) {
		return nil, err
	}
	if err != nil || r.Session != session || r.User != user || time.Now().After(r.Expires) {
		return nil, errNotFound
	}
	return &r, nil
}

// resumeStored serves the retry of a call any facade process asked its host
// about: the answer is published and the call waited for until its
// deadline, its result or the next question.
func (c *confirmer) resumeStored(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	r, err := c.states.getState(ctx, c.session, c.user, req.Params.RequestState)
	if errors.Is(err, errNotFound) {
		return unknownState(req.Params.RequestState), nil
	}
	if err != nil {
		return mcp.NewToolResultError("Error: " + err.Error()), nil
	}
	_, hold := c.holds(ctx, req)
	dctx, cancelDeadline := context.WithDeadline(ctx, r.Deadline)
	defer cancelDeadline()
	wctx, cancel := context.WithTimeout(dctx, hold) // whichever comes first
	defer cancel()
	// Watch before answering, so the question the answer leads to is seen.
	next, err := c.questions.watchCall(wctx, r.Tool, r.CallID)
	if err != nil {
		c.log.Warn("facade: a bridged server's questions of this call are left to the bus", "tool", r.Tool, "err", err)
	}
	a := ask{Park: r.Park, ReplyID: r.ReplyID, deadline: r.Deadline}
	if r.Kind == inputQuestion {
		qn, ok := questionOf(r.Park, r.Tool, r.CallID, c.user)
		if !ok {
			return unknownState(req.Params.RequestState), nil
		}
		a.ReplyID, a.Question = r.AskReplyID, &qn
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
			if _, ok := q.params(c.remember, canElicitURL(ctx)); !ok {
				continue
			}
			base := *r
			base.Kind, base.AskReplyID = "", ""
			state, nr, res := c.newRound(ctx, base, q)
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
			if wctx.Err() != nil && r.Kind == inputQuestion {
				return mcp.NewToolResultError(stillRunningText(*r, c.session)), nil
			}
			if wctx.Err() != nil {
				return mcp.NewToolResultError(stillParkedText(r.CallID, r.Tool, r.Park.Kind, r.Park.Subject, r.ReplyID, c.session)), nil
			}
			return mcp.NewToolResultError("Error: " + d.err.Error()), nil
		}
	}
}

// A bridged server's question put to the host: docs/mcp.md "Bridged
// servers' questions".

// relayer puts a session's bridged servers' questions to its host and
// answers their parks with the host's choice.
type relayer struct {
	cl        *client.Client
	session   string
	user      string
	mayElicit func(context.Context) bool
	asked     claims // the questions the session's hosts are asked
	log       *slog.Logger
}

// middleware relays the questions of a bridged tool's server to the host
// for as long as the host's call of it runs.
func (q *relayer) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		srv, ok := bridgedServer(req.Params.Name)
		// A task-augmented call outlives its request, whose context the
		// host's elicitation would need: its questions stay on the bus.
		if !ok || req.Params.Task != nil || !q.mayElicit(ctx) || server.IsModernRequest(ctx) || server.ServerFromContext(ctx) == nil {
			return next(ctx, req)
		}
		ev, err := q.cl.Watch(ctx, q.session)
		if err != nil {
			return next(ctx, req)
		}
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { q.relay(rctx, ev, srv, &wg) })
		defer func() { stop(); _ = ev.Stop(context.WithoutCancel(ctx)); wg.Wait() }()
		return next(ctx, req)
	}
}

// bridgedServer is the candidate server prefix of a bridged tool's name
// (mcp__<server>__<tool>): the question's own server is matched against
// it, so a server whose name holds "__" works too.
func bridgedServer(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "mcp__")
	return rest, ok && strings.Contains(rest, "__")
}

// relay puts every question of srv parked in the session for the
// session's user to the host, until ctx ends.
func (q *relayer) relay(ctx context.Context, ev *client.Events, prefix string, wg *sync.WaitGroup) {
	q.eachParked(ctx, ev, func(replyID string, p bus.Parked) bool {
		if qn, ok := q.take(p, prefix); ok {
			wg.Go(func() {
				defer q.asked.unclaim(p.ID)
				elicit(ctx, ask{Park: p, ReplyID: replyID, Question: &qn}, false, q.answerQuestion)
			})
		}
		return true
	})
}

// eachParked calls fn with every call parked in ev, and the reply id of
// the batch that parked it, until ctx or ev ends or fn returns false. A
// question tool's call a bridge did not ask (no "asked": parked on P.call
// by a router of 1.16, or forged) is logged and never taken.
func (q *relayer) eachParked(ctx context.Context, ev *client.Events, fn func(replyID string, p bus.Parked) bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-ev.C:
			if !ok {
				return
			}
			var pe bus.ParkedEvent
			if e.Type != bus.TypeCallParked || e.DataAs(&pe) != nil {
				continue
			}
			for _, p := range pe.Calls {
				if !p.Asked && bus.QuestionTool(p.Name) {
					q.log.Debug("facade: a question not asked by a bridge ignored", "tool", p.Name, "call", p.ID, "reply", e.ReplyID)
					continue
				}
				if !fn(e.ReplyID, p) {
					return
				}
			}
		}
	}
}

// take is parseQuestion for the session's user, claiming the question:
// false when a host of the session has it already.
func (q *relayer) take(p bus.Parked, prefix string) (bus.Question, bool) {
	qn, ok := parseQuestion(p, prefix, q.user)
	return qn, ok && q.asked.claim(p.ID)
}

// parseQuestion reports whether p is a question a bridge asked (on
// P.ask.<session>, docs/protocol.md 12) of a server the call's tool name
// starts with (mcp__<server>__), for user.
func parseQuestion(p bus.Parked, prefix, user string) (bus.Question, bool) {
	var q bus.Question
	if p.Kind != bus.KindExternal || !p.Asked || !bus.QuestionTool(p.Name) ||
		json.Unmarshal(p.Input, &q) != nil || p.Name != bridge.ElicitName(q.Server) || !strings.HasPrefix(prefix, q.Server+"__") {
		return q, false
	}
	var asker string
	if len(q.User) > 0 && json.Unmarshal(q.User, &asker) != nil {
		return q, false
	}
	if asker != user {
		return q, false // another user's question: never this host's
	}
	return q, true
}

// claims are the park ids of the questions a session's hosts are being
// asked; the zero value is ready.
type claims struct {
	mu  sync.Mutex
	ids map[string]bool
}

// claim marks park id as asked; false when it is, or maxAsked are.
func (c *claims) claim(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[string]bool{}
	}
	if c.ids[id] || len(c.ids) >= maxAsked {
		return false
	}
	c.ids[id] = true
	return true
}

func (c *claims) unclaim(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ids, id)
}

// maxAsked bounds the questions a session's hosts are asked at once.
const maxAsked = 64

// questionParams is the elicitation that puts qn to a host; false when the
// host cannot show it (a URL question without URL elicitation, a
// requested schema that is not an object).
func questionParams(qn bus.Question, url bool) (mcp.ElicitationParams, bool) {
	params := mcp.ElicitationParams{Mode: qn.Mode, Message: questionText(qn), URL: qn.URL, ElicitationID: qn.ElicitationID}
	switch {
	case qn.Mode == mcp.ElicitationModeURL:
		return params, url
	case len(qn.RequestedSchema) > 0:
		var schema map[string]any
		if json.Unmarshal(qn.RequestedSchema, &schema) != nil || schema == nil {
			return params, false
		}
		params.RequestedSchema = schema
	default:
		params.RequestedSchema = map[string]any{"type": "object"}
	}
	return params, true
}

// hostAnswer is the park's answer text for the host's response; false for a
// cancel or anything else, which leaves the question to the others.
func hostAnswer(res *mcp.ElicitationResult) (string, bool) {
	if res == nil {
		return "", false
	}
	answer := map[string]any{"action": string(res.Action)}
	switch res.Action {
	case mcp.ElicitationResponseActionAccept:
		if res.Content != nil {
			answer["content"] = res.Content
		}
	case mcp.ElicitationResponseActionDecline:
	default:
		return "", false
	}
	text, err := json.Marshal(answer)
	return string(text), err == nil
}

// answerQuestion answers the question's park with the host's response (a
// cancel publishes nothing).
func (q *relayer) answerQuestion(ctx context.Context, a ask, res *mcp.ElicitationResult) {
	text, ok := hostAnswer(res)
	if !ok {
		return
	}
	if err := q.cl.Parked().Answer(ctx, a.Park.Name, q.session, a.ReplyID, a.Park.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text(text)}); err != nil {
		q.log.Debug("facade: the host's answer to a bridged server's question not taken", "tool", a.Park.Name, "err", err)
	}
}

// questionOf is parseQuestion for the call callID of tool: the question
// names the call among its asking calls.
func questionOf(p bus.Parked, tool, callID, user string) (bus.Question, bool) {
	prefix, ok := bridgedServer(tool)
	if !ok {
		return bus.Question{}, false
	}
	q, ok := parseQuestion(p, prefix, user)
	return q, ok && slices.Contains(q.Calls, callID)
}

// watchCall returns the questions parked for the call callID of tool, for
// the session's user, each once, until ctx ends; nil when tool is not a
// bridged one. The watch is made before it returns.
func (q *relayer) watchCall(ctx context.Context, tool, callID string) (<-chan ask, error) {
	if _, ok := bridgedServer(tool); !ok {
		return nil, nil
	}
	ev, err := q.cl.Watch(ctx, q.session)
	if err != nil {
		return nil, err
	}
	out := make(chan ask)
	go func() {
		defer func() { _ = ev.Stop(context.WithoutCancel(ctx)) }()
		seen := map[string]bool{}
		q.eachParked(ctx, ev, func(replyID string, p bus.Parked) bool {
			qn, ok := questionOf(p, tool, callID, q.user)
			if !ok || seen[p.ID] || len(seen) >= maxAsked {
				return true
			}
			seen[p.ID] = true
			select {
			case out <- ask{Park: p, ReplyID: replyID, Question: &qn}:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return out, nil
}

// questionText is the message the host's user reads.
func questionText(q bus.Question) string {
	msg := fmt.Sprintf("The MCP server %s asks: %s", q.Server, q.Message)
	if q.Refused != "" {
		msg += " (" + q.Refused + ")"
	}
	return msg
}
