package security

import "github.com/toolbus/toolbus/bus"

// RoleFacade is the MCP facade's login (router --mcp-listen, toolbus
// mcp): it calls, lists, cancels and watches events in every session on
// behalf of the hosts it authenticated, and answers the confirmations
// their users give through elicitation (and the bridged servers' questions
// of Spec.FacadeAnswers). It follows the writes that change a session's
// listing (subscriptions, no consumers). Nothing more: no JetStream
// administration, no consumer, no exec, no registration, no admin verbs,
// no writes to any bucket but its own.
const RoleFacade = "facade"

func facade(s bus.Subjects, answers []string) User {
	// An agent of every session, under the facade's own inbox.
	a := agent(s, "", nil)
	pub := append([]string{}, a.Permissions.Publish...)
	// The confirmations its hosts' users answer, on P.approve.<tool>
	// (docs/protocol.md 6.3): bound to the parked input's digest, rules
	// only among the suggested ones. It cannot answer external tools.
	pub = append(pub, s.Handoffs.Approve("*"))
	// The bridged servers' resources its hosts list and read
	// (P.resources.<server>, docs/protocol.md 12).
	pub = append(pub, s.All("resources"))
	// The bridged servers' questions its hosts' users answer (Spec.FacadeAnswers:
	// mcp__<server>__elicit only), and no other external tool.
	for _, t := range answers {
		pub = append(pub, s.Handoffs.Answer(t))
	}
	// The writes that tell it a session's listing may have changed: plain
	// subscriptions to the buckets' and the skills' metadata subjects (read
	// below), never a consumer (its deliver subject would be unchecked).
	sub := []string{s.Events("*"), inbox(RoleFacade) + ".>"}
	for _, b := range []string{bus.BucketSessions, bus.BucketTools, bus.BucketGroups, bus.BucketWorkers} {
		sub = append(sub, "$KV."+s.Bucket(b)+".>")
	}
	sub = append(sub, "$O."+s.ObjectStore(bus.ObjectSkills)+".M.>")
	// Its own bucket of MCP tasks and request states (docs/mcp.md): read
	// (gets, the stream's info for its keys), write, follow a task's key,
	// and create it when no router has.
	mcpKV := s.Bucket(bus.BucketMCP)
	pub = append(pub, jsAPI+"STREAM.INFO.KV_"+mcpKV, "$KV."+mcpKV+".>", jsAPI+"DIRECT.GET.KV_"+mcpKV+".>",
		jsAPI+"STREAM.MSG.GET.KV_"+mcpKV, jsAPI+"STREAM.CREATE.KV_"+mcpKV)
	sub = append(sub, "$KV."+mcpKV+".>")
	return User{Name: RoleFacade, Role: RoleFacade, InboxPrefix: inbox(RoleFacade), Permissions: Permissions{
		Publish:   pub,
		Subscribe: sub,
	}}
}
