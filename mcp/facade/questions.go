package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp/bridge"
)

// A bridged server's question put to the host (docs/mcp.md "Bridged
// servers' questions"): while a host that declared elicitation calls a
// bridged tool under the host_user policy, a question that server parks
// in the session (a call of mcp__<server>__elicit, docs/protocol.md 12)
// for the host's own user is put to the host through elicitation, and its
// answer answers the park. The park stays answerable by `toolbus answer`
// and approvers meanwhile; the first answer wins. A cancel, an error or a
// host that cannot show the question leaves it to the others.

// question is what the bridge's elicit call carries.
type question = bus.Question

// relayer puts a session's bridged servers' questions to its host and
// answers their parks with the host's choice.
type relayer struct {
	cl        *client.Client
	session   string
	user      string
	mayElicit func(context.Context) bool
	take      func(p bus.Parked, prefix string) (question, bool) // session.questionFor
	release   func(id string)                                    // a taken question is done with
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
	eachParked(ctx, ev, func(replyID string, p bus.Parked) bool {
		if qn, ok := q.take(p, prefix); ok {
			wg.Go(func() { q.askHost(ctx, replyID, p, qn) })
		}
		return true
	})
}

// eachParked calls fn with every call parked in ev, and the reply id of
// the batch that parked it, until ctx or ev ends or fn returns false.
func eachParked(ctx context.Context, ev *client.Events, fn func(replyID string, p bus.Parked) bool) {
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
				if !fn(e.ReplyID, p) {
					return
				}
			}
		}
	}
}

// questionFor is parseQuestion for the session's user, claiming the
// question: false when a host of the session has it already.
func (s *session) questionFor(p bus.Parked, prefix string) (question, bool) {
	q, ok := parseQuestion(p, prefix, s.user)
	return q, ok && s.asked.claim(p.ID)
}

// parseQuestion reports whether p is a question of a server the call's
// tool name starts with (mcp__<server>__), for user.
func parseQuestion(p bus.Parked, prefix, user string) (question, bool) {
	var q question
	if p.Kind != bus.KindExternal || !strings.HasPrefix(p.Name, "mcp__") || !strings.HasSuffix(p.Name, "__elicit") ||
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

func (q *relayer) askHost(ctx context.Context, replyID string, p bus.Parked, qn question) {
	defer q.release(p.ID)
	params, ok := questionParams(qn, canElicitURL(ctx))
	if !ok {
		return
	}
	res, err := server.ServerFromContext(ctx).RequestElicitation(ctx, mcp.ElicitationRequest{Params: params})
	if err != nil || res == nil {
		return
	}
	q.answerQuestion(ctx, asked{p: p, replyID: replyID, q: qn}, res)
}

// questionParams is the elicitation that puts qn to a host; false when the
// host cannot show it (a URL question without URL elicitation, a
// requested schema that is not an object).
func questionParams(qn question, url bool) (mcp.ElicitationParams, bool) {
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

// hostAnswer is the answer text of the park for the host's response;
// false for a cancel (or anything else), which leaves the question to the
// others.
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

// answerQuestion answers the question's park with the host's response;
// it reports whether an answer was published.
func (q *relayer) answerQuestion(ctx context.Context, a asked, res *mcp.ElicitationResult) bool {
	text, ok := hostAnswer(res)
	if !ok {
		return false
	}
	if err := q.cl.Parked().Answer(ctx, a.p.Name, q.session, a.replyID, a.p.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text(text)}); err != nil {
		q.log.Debug("facade: the host's answer to a bridged server's question not taken", "tool", a.p.Name, "err", err)
	}
	return true
}

// asked is a bridged server's question: its park, the reply id of the
// bridge's batch that parked it, and the question.
type asked struct {
	p       bus.Parked
	replyID string
	q       question
}

// questionOf is parseQuestion for the call callID of tool: the question
// names the call among its asking calls.
func questionOf(p bus.Parked, tool, callID, user string) (question, bool) {
	prefix, ok := bridgedServer(tool)
	if !ok {
		return question{}, false
	}
	q, ok := parseQuestion(p, prefix, user)
	return q, ok && slices.Contains(q.Calls, callID)
}

// watchCall returns the questions parked for the call callID of tool, for
// the session's user, each once, until ctx ends; nil when tool is not a
// bridged one. The watch is made before it returns.
func (q *relayer) watchCall(ctx context.Context, tool, callID string) (<-chan asked, error) {
	if _, ok := bridgedServer(tool); !ok {
		return nil, nil
	}
	ev, err := q.cl.Watch(ctx, q.session)
	if err != nil {
		return nil, err
	}
	out := make(chan asked)
	go func() {
		defer func() { _ = ev.Stop(context.WithoutCancel(ctx)) }()
		seen := map[string]bool{}
		eachParked(ctx, ev, func(replyID string, p bus.Parked) bool {
			qn, ok := questionOf(p, tool, callID, q.user)
			if !ok || seen[p.ID] || len(seen) >= maxAsked {
				return true
			}
			seen[p.ID] = true
			select {
			case out <- asked{p: p, replyID: replyID, q: qn}:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return out, nil
}

// questionText is the message the host's user reads.
func questionText(q question) string {
	msg := fmt.Sprintf("The MCP server %s asks: %s", q.Server, q.Message)
	if q.Refused != "" {
		msg += " (" + q.Refused + ")"
	}
	return msg
}
