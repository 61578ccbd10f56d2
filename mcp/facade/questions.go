package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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
// bridged tool mcp__<server>__<tool> under the host_user policy, a
// question that server parks in the session (a call of
// mcp__<server>__elicit, docs/protocol.md 12) for the host's own user is
// put to the host through elicitation, and its answer answers the park.
// The park stays answerable by `toolbus answer` and approvers meanwhile;
// the first answer wins. A decline declines; a cancel, an error or a host
// that cannot show the question leaves it to the others.

// question is what the bridge's elicit call carries (bridge.elicitInput).
type question struct {
	Server          string          `json:"server"`
	User            json.RawMessage `json:"user,omitempty"`
	Mode            string          `json:"mode"`
	Message         string          `json:"message"`
	RequestedSchema json.RawMessage `json:"requested_schema,omitempty"`
	URL             string          `json:"url,omitempty"`
	ElicitationID   string          `json:"elicitation_id,omitempty"`
	Refused         string          `json:"refused,omitempty"`
}

// relayer puts a session's bridged servers' questions to its host: it
// watches the session while the host calls a bridged tool, takes the
// questions meant for the host (take: session.questionFor, which claims
// them) and answers their parks with the host's choice.
type relayer struct {
	bus       questionBus
	session   string
	mayElicit func(context.Context) bool
	take      func(p bus.Parked, prefix string) (question, bool)
	release   func(id string) // a taken question is done with
	log       *slog.Logger
}

// questionBus is what relaying questions needs of the bus (client.Client).
type questionBus interface {
	Watch(ctx context.Context, session string) (*client.Events, error)
	Answer(ctx context.Context, tool, session, replyID, callID string, a bus.Answer) error
}

var _ questionBus = (*client.Client)(nil)

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
		// Watch before the call is made, so its server's question is seen.
		ev, err := q.bus.Watch(ctx, q.session)
		if err != nil {
			return next(ctx, req)
		}
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { q.relay(rctx, ev, srv, &wg) })
		defer func() { stop(); ev.Stop(); wg.Wait() }()
		return next(ctx, req)
	}
}

// bridgedServer is the candidate server of a bridged tool's name
// (mcp__<server>__<tool>): the question's own server is matched against
// the name's prefix, so a server whose name holds "__" works too.
func bridgedServer(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "mcp__")
	return rest, ok && strings.Contains(rest, "__")
}

// relay puts every question of srv parked in the session for the
// session's user to the host, until ctx ends.
func (q *relayer) relay(ctx context.Context, ev *client.Events, prefix string, wg *sync.WaitGroup) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-ev.C:
			if !ok {
				return
			}
			if e.Type != bus.TypeCallParked {
				continue
			}
			var pe bus.ParkedEvent
			if e.DataAs(&pe) != nil {
				continue
			}
			for _, p := range pe.Calls {
				qn, ok := q.take(p, prefix)
				if !ok {
					continue
				}
				replyID := e.ReplyID
				wg.Go(func() { q.askHost(ctx, replyID, p, qn) })
			}
		}
	}
}

// questionFor reports whether p is a question of a server the call's
// tool name starts with (mcp__<server>__), for the session's user, not
// yet put to a host; it claims a question it takes.
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

// claims are the bridged servers' questions a session's hosts are being
// asked (park ids); the zero value is ready.
type claims struct {
	mu  sync.Mutex
	ids map[string]bool
}

// claim marks park id as put to a host of this session; false when one
// already has it, or maxAsked are asked.
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

// askHost asks the host of ctx the question and answers park p with its
// choice.
func (q *relayer) askHost(ctx context.Context, replyID string, p bus.Parked, qn question) {
	defer q.release(p.ID)
	params := mcp.ElicitationParams{Mode: qn.Mode, Message: questionText(qn), URL: qn.URL, ElicitationID: qn.ElicitationID}
	if qn.Mode == mcp.ElicitationModeURL {
		if !canElicitURL(ctx) {
			return
		}
	} else if len(qn.RequestedSchema) > 0 {
		var schema map[string]any
		if json.Unmarshal(qn.RequestedSchema, &schema) != nil {
			return
		}
		params.RequestedSchema = schema
	} else {
		params.RequestedSchema = map[string]any{"type": "object"}
	}
	res, err := server.ServerFromContext(ctx).RequestElicitation(ctx, mcp.ElicitationRequest{Params: params})
	if err != nil || res == nil {
		return
	}
	answer := map[string]any{"action": string(res.Action)}
	switch res.Action {
	case mcp.ElicitationResponseActionAccept:
		if res.Content != nil {
			answer["content"] = res.Content
		}
	case mcp.ElicitationResponseActionDecline:
	default:
		return // cancel: left to `toolbus answer` and the approvers
	}
	text, _ := json.Marshal(answer)
	if err := q.bus.Answer(ctx, p.Name, q.session, replyID, p.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text(string(text))}); err != nil {
		q.log.Debug("facade: the host's answer to a bridged server's question not taken", "tool", p.Name, "err", err)
	}
}

// questionText is the message the host's user reads: the server's own,
// naming the server (and why a previous answer was refused).
func questionText(q question) string {
	msg := fmt.Sprintf("The MCP server %s asks: %s", q.Server, q.Message)
	if q.Refused != "" {
		msg += " (" + q.Refused + ")"
	}
	return msg
}

// canElicitURL reports whether the client of ctx declared URL-mode
// elicitation.
func canElicitURL(ctx context.Context) bool {
	c, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	return ok && c.GetClientCapabilities().Elicitation != nil && c.GetClientCapabilities().Elicitation.URL != nil
}
