package security

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/security"
)

// TestAskOnlyBridges (docs/protocol.md 12, 1.17; docs/security.md): only
// the bridge's login may publish a question on P.ask.<s>, so a park marked
// "asked" is a bridge's. With the generated permissions on a real
// nats-server, the bridge asks in alice's session, follows the question's
// events and withdraws it; every other login's publish there is refused by
// NATS; and an agent's request-scoped mcp__q__elicit on P.call is refused
// by the router.
func TestAskOnlyBridges(t *testing.T) {
	d := newDeployment(t)
	s := bus.NewSubjects("")
	question := bus.Batch{User: client.Input("alice"), Calls: []bus.Call{{ID: "q1", Name: "mcp__q__elicit",
		Input: json.RawMessage(`{"server":"q","user":"alice","mode":"form","message":"Your name?","calls":["c1"]}`)}},
		Request: &bus.Request{MergeMode: bus.MergeExternalOnly, ExternalTools: []bus.ExternalTool{{Name: "mcp__q__elicit",
			Description: "x", InputSchema: json.RawMessage(`{"type":"object"}`)}}}}

	b := d.conn(security.RoleBridge)
	bc := b.client()
	ev, err := bc.Watch(testCtx(t), "s1")
	must(t, err)
	defer ev.Stop(testCtx(t))
	replyID := client.NewAskID()
	reply, err := bc.Parked().Ask(testCtx(t), "s1", question, client.WithReplyID(replyID))
	if err != nil || len(reply.Parked) != 1 || !reply.Parked[0].Asked {
		t.Fatalf("the bridge's question: %+v %v, want parked, asked", reply, err)
	}
	var pe bus.ParkedEvent
	if err := waitType(t, ev, bus.TypeCallParked).DataAs(&pe); err != nil || len(pe.Calls) != 1 || !pe.Calls[0].Asked {
		t.Fatalf("call.parked of the bridge's question: %+v %v", pe, err)
	}
	must(t, bc.Cancel(testCtx(t), "s1", replyID))
	waitType(t, ev, bus.TypeBatchDone)
	b.noViolations()

	for _, user := range []string{security.RoleAgent, "session-s1", security.RoleFacade, security.RoleWorker, security.RoleOperator,
		security.RoleApprover, "handler-picker"} {
		t.Run(user, func(t *testing.T) {
			d.conn(user).denyPublish(s.Handoffs.Ask("s1"))
		})
	}

	_, err = d.conn("session-s1").client().Call(testCtx(t), "s1", question)
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "never in a call batch") {
		t.Fatalf("an agent's request-scoped mcp__q__elicit on P.call: %v, want bad_request", err)
	}
}

// hostNames is a host's user who gives the name "alice" to every question.
type hostNames struct{ asked chan string }

func (h *hostNames) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.asked <- req.Params.Message
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"name": "alice"}}}, nil
}

// TestBridgeLoginAsks: a real bridge logged in as the generated bridge
// user serves its server's tools and asks its question on P.ask; alice's
// host (host_user, through the facade with --facade-answers
// mcp__q__elicit) is asked it and her answer reaches the server. Neither
// login meets a permissions violation. (Logged in as the plain worker,
// the bridge cannot ask: the call never ends.)
func TestBridgeLoginAsks(t *testing.T) {
	withAnswers := spec
	withAnswers.FacadeAnswers = []string{"mcp__q__elicit"}
	d := newDeploymentOf(t, withAnswers)
	bl := d.conn(security.RoleBridge)
	askBridge(t, bl)

	url, fl := d.mcpFacade(t)
	host := &hostNames{asked: make(chan string, 4)}
	c := mcpConnect(t, url+"/mcp/s1", hostToken, host)
	waitListed(t, c, "mcp__q__ask")
	if r := mcpCall(t, c, "mcp__q__ask"); r.IsError || mcpText(r) != `accept {"name":"alice"}` {
		t.Fatalf("the bridged question answered by alice's host: %+v", r)
	}
	if q := testkit.Recv(t, host.asked, bound, "alice's question"); !strings.Contains(q, "The MCP server q asks: Your name") {
		t.Fatalf("alice's host was asked %q", q)
	}
	bl.noViolations()
	fl.noViolations()
}
