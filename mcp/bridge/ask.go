package bridge

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schemas"
)

// What a bridged server may ask of its client (docs/protocol.md 12): roots,
// elicitation, which parks as a call of mcp__<server>__elicit in the session
// of the bus call that caused it (asked on P.ask.<session>, where only
// bridges publish), and sampling, a call of sampling_tool.

const (
	// maxQuestions bounds the elicitation and sampling requests of one
	// server waiting at once, so a server cannot flood a session with
	// parked calls or the bridge with subscriptions.
	maxQuestions = 8
	// maxElicitRounds bounds how often an elicitation is parked again
	// after an answer that did not fit the requested schema.
	maxElicitRounds = 3
)

// asker answers a server's requests of the bridge on behalf of the bus
// call behind them (origin).
type asker struct {
	s            *Server
	defaultRoots []string // Config.Roots, when the server has none
	bus          *client.Client
	origin       func(ctx context.Context) (*origin, error) // link.origin
	questions    chan struct{}                              // a semaphore of maxQuestions
	log          *slog.Logger
}

// clientOptions declare the bridge's client capabilities (both elicitation
// modes, roots without listChanged; mcp-go declares sampling) and answer the
// server's requests with a.
func (a *asker) clientOptions() []mcpclient.ClientOption {
	c := mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{Form: &struct{}{}, URL: &struct{}{}}}
	c.Roots = &struct {
		ListChanged bool `json:"listChanged,omitempty"`
	}{}
	return []mcpclient.ClientOption{mcpclient.WithClientCapabilities(c),
		mcpclient.WithRootsHandler(a), mcpclient.WithElicitationHandler(a), mcpclient.WithSamplingHandler(a)}
}

// ListRoots answers roots/list: the server's configured roots, else the
// bridge's (the worker's --workdir), as file:// URIs.
func (a *asker) ListRoots(context.Context, mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	list := a.s.Roots
	if len(list) == 0 {
		list = a.defaultRoots
	}
	out := &mcp.ListRootsResult{Roots: []mcp.Root{}}
	for _, r := range list {
		out.Roots = append(out.Roots, rootOf(r))
	}
	return out, nil
}

func rootOf(r string) mcp.Root {
	if u, err := url.Parse(r); err == nil && strings.HasPrefix(r, "file://") {
		return mcp.Root{URI: r, Name: filepath.Base(u.Path)}
	}
	if abs, err := filepath.Abs(r); err == nil {
		r = abs
	}
	return mcp.Root{URI: (&url.URL{Scheme: "file", Path: filepath.ToSlash(r)}).String(), Name: filepath.Base(r)}
}

// origin is the bus call (or calls, of one session) a server's request
// belongs to.
type origin struct {
	session string
	user    json.RawMessage
	context json.RawMessage
	calls   []string
	ctxs    []context.Context
}

// origin finds the bus call behind a server request: the call whose MCP
// request carried ctx (streamable HTTP answers on the call's own stream),
// else the server's calls in flight when they all belong to one session
// and user (stdio gives no other clue). Calls of several sessions at once
// are refused: the bridge cannot tell whose user should answer.
func (l *link) origin(ctx context.Context) (*origin, error) {
	if ids, ok := ctx.Value(requestIDsKey{}).(*requestIDs); ok && ids.call != nil {
		c := ids.call
		return &origin{session: c.call.SessionID, user: c.call.User, context: c.call.Context, calls: []string{c.call.ID}, ctxs: []context.Context{c.ctx}}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var o *origin
	for _, f := range l.progress {
		c := f.call
		switch {
		case o == nil:
			o = &origin{session: c.SessionID, user: c.User, context: c.Context}
		case o.session != c.SessionID || string(o.user) != string(c.User):
			return nil, fmt.Errorf("the bridge cannot tell which bus call asks: calls of MCP server %q from several sessions or users are in flight", l.s.Name)
		}
		o.calls = append(o.calls, c.ID)
		o.ctxs = append(o.ctxs, f.ctx)
	}
	if o == nil {
		return nil, fmt.Errorf("the bridge asks only on behalf of a bus call, and no call of MCP server %q is in flight", l.s.Name)
	}
	slices.Sort(o.calls)
	o.calls = slices.Compact(o.calls)
	return o, nil
}

// bound returns ctx cut short when every call of o has ended: a question
// outlives none of the calls it is asked for.
func (o *origin) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	var left atomic.Int64
	left.Store(int64(len(o.ctxs)))
	stops := make([]func() bool, 0, len(o.ctxs))
	for _, c := range o.ctxs {
		stops = append(stops, context.AfterFunc(c, func() {
			if left.Add(-1) == 0 {
				cancel(errors.New("the bus call that asked has ended"))
			}
		}))
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel(context.Canceled)
	}
}

// ElicitName is the request-scoped external tool an elicitation of server
// parks as.
func ElicitName(server string) string { return ToolName(server, "elicit") }

var elicitSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"server":{"type":"string"},"user":{},"mode":{"type":"string","enum":["form","url"]},"message":{"type":"string"},` +
	`"requested_schema":{"type":"object"},"url":{"type":"string"},"elicitation_id":{"type":"string"},` +
	`"calls":{"type":"array","items":{"type":"string"}},"refused":{"type":"string"}},` +
	`"required":["server","mode","message","calls"]}`)

const elicitDescription = "An MCP server asks the user. Answer with a text block holding " +
	`{"action":"accept","content":{...}} (content fits requested_schema), {"action":"decline"} or {"action":"cancel"}; ` +
	"a bare JSON object is accepted as the content; an error answer declines."

// Elicit answers elicitation/create: it parks a call of the elicit tool in
// the origin's session and returns the answer, checked against the
// requested schema (a misfit is parked again, then cancelled).
func (a *asker) Elicit(ctx context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	o, err := a.origin(ctx)
	if err != nil {
		return nil, err
	}
	ctx, done := o.bound(ctx)
	defer done()
	in := bus.Question{Server: a.s.Name, User: o.user, Mode: r.Params.Mode, Message: r.Params.Message, URL: r.Params.URL,
		ElicitationID: r.Params.ElicitationID, Calls: o.calls}
	in.Mode = cmp.Or(in.Mode, mcp.ElicitationModeForm)
	var schema *schemas.Schema
	if in.Mode == mcp.ElicitationModeForm && r.Params.RequestedSchema != nil {
		raw, err := json.Marshal(r.Params.RequestedSchema)
		if err != nil {
			return nil, fmt.Errorf("requested schema: %w", err)
		}
		in.RequestedSchema = raw
		if schema, err = schemas.Compile(raw); err != nil {
			return nil, fmt.Errorf("requested schema: %w", err)
		}
	}
	name := ElicitName(a.s.Name)
	tool := bus.ExternalTool{Name: name, Description: elicitDescription, InputSchema: elicitSchema}
	for range maxElicitRounds {
		res, err := a.ask(ctx, o, bus.Call{Name: name, Input: mustJSON(in)}, &bus.Request{MergeMode: "external_only", ExternalTools: []bus.ExternalTool{tool}})
		if err != nil {
			return nil, err
		}
		out, why := elicitAnswer(res, schema)
		if why == "" {
			return out, nil
		}
		a.log.Warn("bridge: elicitation answer refused; asking again", "why", why)
		in.Refused = "the previous answer was refused: " + why
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionCancel}}, nil
}

// elicitAnswer reads an answer to an elicit call; why: it cannot be given
// to the server.
func elicitAnswer(res bus.Result, schema *schemas.Schema) (out *mcp.ElicitationResult, why string) {
	action := func(a mcp.ElicitationResponseAction, content any) *mcp.ElicitationResult {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: a, Content: content}}
	}
	if res.State == bus.StateError && (res.Error == nil || res.Error.Code == bus.CodeToolError) {
		return action(mcp.ElicitationResponseActionDecline, nil), ""
	} else if res.State != bus.StateSuccess { // timeout, limit_exceeded, interrupted, denied ...
		return action(mcp.ElicitationResponseActionCancel, nil), ""
	}
	text := strings.TrimSpace(answerText(res.Output))
	switch strings.ToLower(text) {
	case "accept", "decline", "cancel":
		text = `{"action":"` + strings.ToLower(text) + `"}`
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &v); err != nil || v == nil {
		return nil, `the answer is not a JSON object, nor "accept", "decline" or "cancel"`
	}
	act := mcp.ElicitationResponseActionAccept
	content := json.RawMessage(text)
	if raw, ok := v["action"]; ok {
		var a string
		if json.Unmarshal(raw, &a) != nil || (a != "accept" && a != "decline" && a != "cancel") {
			return nil, `"action" must be "accept", "decline" or "cancel"`
		}
		act, content = mcp.ElicitationResponseAction(a), v["content"]
	}
	if act != mcp.ElicitationResponseActionAccept {
		return action(act, nil), ""
	}
	if schema == nil && len(content) == 0 {
		return action(act, nil), ""
	}
	if len(content) == 0 {
		content = json.RawMessage(`{}`)
	}
	var c any
	if err := json.Unmarshal(content, &c); err != nil {
		return nil, "content: " + err.Error()
	}
	if _, ok := c.(map[string]any); !ok {
		return nil, "content must be a JSON object"
	}
	if schema != nil {
		if details := schema.Validate(c); len(details) > 0 {
			parts := make([]string, 0, len(details))
			for _, d := range details {
				parts = append(parts, d.Path+": "+d.Message)
			}
			return nil, "content does not fit the requested schema: " + strings.Join(parts, "; ")
		}
	}
	return action(act, c), ""
}

// answerText is the text of an answer: its text blocks, else its first
// application/json data block.
func answerText(out []bus.Block) string {
	var parts []string
	for _, b := range out {
		if b.Type == bus.BlockText {
			parts = append(parts, b.Text)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "")
	}
	for _, b := range out {
		if b.Type == bus.BlockData && b.MediaType == "application/json" && b.Data != "" {
			if d, err := base64.StdEncoding.DecodeString(b.Data); err == nil {
				return string(d)
			}
		}
	}
	return ""
}

var errNoSampling = errors.New("sampling is refused: no sampling_tool is configured for this MCP server in the bridge's config")

// CreateMessage answers sampling/createMessage with a call of the
// server's sampling_tool in the origin's session, the request's params as
// input; its text becomes the assistant's message.
func (a *asker) CreateMessage(ctx context.Context, r mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	if a.s.SamplingTool == "" {
		return nil, fmt.Errorf("MCP server %q: %w", a.s.Name, errNoSampling)
	}
	o, err := a.origin(ctx)
	if err != nil {
		return nil, err
	}
	ctx, done := o.bound(ctx)
	defer done()
	res, err := a.ask(ctx, o, bus.Call{Name: a.s.SamplingTool, Input: mustJSON(r.CreateMessageParams)}, nil)
	if err != nil {
		return nil, err
	}
	if res.State != bus.StateSuccess {
		return nil, fmt.Errorf("sampling tool %s: %s: %s", a.s.SamplingTool, res.State, answerText(res.Output))
	}
	return &mcp.CreateMessageResult{Model: a.s.SamplingTool, StopReason: "endTurn",
		SamplingMessage: mcp.SamplingMessage{Role: mcp.RoleAssistant, Content: mcp.NewTextContent(answerText(res.Output))}}, nil
}

// ask runs one call in o's session on the server's behalf and waits for
// its result until ctx ends; then the call is cancelled. A call with a
// request (a question) is asked on P.ask.<session> under a NewAskID,
// anything else called.
func (a *asker) ask(ctx context.Context, o *origin, c bus.Call, req *bus.Request) (bus.Result, error) {
	select {
	case a.questions <- struct{}{}:
		defer func() { <-a.questions }()
	default:
		return bus.Result{}, fmt.Errorf("MCP server %q already has %d questions waiting; refused", a.s.Name, maxQuestions)
	}
	c.ID = "mcp-" + nuid.Next()
	send, replyID := a.bus.Call, client.NewReplyID() // sampling: a call in the session like any other
	if req != nil {
		// A question: on the bridges' own subject, under a reply id no call batch has (docs/protocol.md 12).
		send, replyID = a.bus.Parked().Ask, client.NewAskID()
	}
	ev, err := a.bus.Watch(ctx, o.session)
	if err != nil {
		return bus.Result{}, err
	}
	defer func() { _ = ev.Stop(context.WithoutCancel(ctx)) }()
	b := bus.Batch{Calls: []bus.Call{c}, User: o.user, Context: o.context, Request: req}
	opts := []client.CallOption{client.WithReplyID(replyID)}
	if dl, ok := ctx.Deadline(); ok {
		opts = append(opts, client.WithExpiry(dl))
	}
	settled := false
	defer func() {
		if !settled {
			// Withdraw the question: it may have parked even when the
			// reply did not arrive.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = a.bus.Cancel(cctx, o.session, replyID, c.ID)
			cancel()
		}
	}()
	reply, err := send(ctx, o.session, b, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return bus.Result{}, context.Cause(ctx)
		}
		return bus.Result{}, fmt.Errorf("the bus refused the call: %w", err)
	}
	if len(reply.Results) == 1 {
		settled = true
		return reply.Results[0], nil
	}
	r, err := AwaitResult(ctx, ev, replyID, c.ID)
	if err != nil {
		return bus.Result{}, err
	}
	settled = true
	return *r, nil
}

// AwaitResult waits on ev for the result of call callID of batch replyID:
// its call.result, or the batch.done of a batch that parked nothing (no
// call.result of its own, docs/protocol.md 3.4), until ctx or ev ends.
func AwaitResult(ctx context.Context, ev *client.Events, replyID, callID string) (*bus.Result, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case e, ok := <-ev.C:
			if !ok {
				if ctx.Err() != nil {
					return nil, context.Cause(ctx)
				}
				return nil, errors.New("the session's events ended")
			}
			if r, ok := eventResult(e, replyID, callID); ok {
				return r, nil
			}
		}
	}
}

func eventResult(e *bus.Event, replyID, callID string) (*bus.Result, bool) {
	if e.ReplyID != replyID {
		return nil, false
	}
	switch e.Type {
	case bus.TypeCallResult:
		var r bus.Result
		if e.ToolCallID != callID || e.DataAs(&r) != nil {
			return nil, false
		}
		return &r, true
	case bus.TypeBatchDone:
		var d bus.BatchDone
		if e.DataAs(&d) != nil {
			return nil, false
		}
		if i := slices.IndexFunc(d.Results, func(r bus.Result) bool { return r.ID == callID }); i >= 0 {
			return &d.Results[i], true
		}
	}
	return nil, false
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
