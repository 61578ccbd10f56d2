package facade

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/bus"
)

// Choices of the confirmation put to the host's user.
const (
	choiceAllow       = "allow"
	choiceAllowAlways = "allow and remember"
	choiceDeny        = "deny"
)

// canElicit reports whether the client of ctx declared elicitation.
func canElicit(ctx context.Context) bool {
	s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	return ok && s.GetClientCapabilities().Elicitation != nil
}

// confirm asks the host's user about a confirm park through elicitation
// and answers the park with the choice: allow, allow and remember (a rule
// allowing the tool in this session), or deny. A decline or cancel leaves
// the park for other approvers; an answer that comes second is ignored,
// the first answer from anywhere wins.
func (s *session) confirm(ctx context.Context, p bus.Parked, replyID string) {
	req := mcp.ElicitationRequest{}
	req.Params.Message = fmt.Sprintf("Allow the tool %s to run with input %s?", p.Name, p.Input)
	req.Params.RequestedSchema = map[string]any{"type": "object", "required": []string{"decision"},
		"properties": map[string]any{"decision": map[string]any{"type": "string", "title": "Decision",
			"enum": []string{choiceAllow, choiceAllowAlways, choiceDeny}}}}
	res, err := server.ServerFromContext(ctx).RequestElicitation(ctx, req)
	if err != nil || res.Action != mcp.ElicitationResponseActionAccept {
		return
	}
	content, _ := res.Content.(map[string]any)
	decision, _ := content["decision"].(string)
	yes := decision == choiceAllow || decision == choiceAllowAlways
	a := bus.Answer{Confirmed: &yes}
	if decision == choiceAllowAlways {
		a.Rules = []bus.Rule{{Tool: p.Name, Behavior: "allow"}}
	}
	if decision != choiceAllow && decision != choiceAllowAlways && decision != choiceDeny {
		return
	}
	if err := s.f.cl.Answer(ctx, p.Name, s.id, replyID, p.ID, a); err != nil {
		s.f.cfg.Logger.Debug("facade: elicited answer not taken", "tool", p.Name, "err", err)
	}
}
