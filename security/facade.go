package security

import "github.com/toolbus/toolbus/bus"

// RoleFacade is the MCP facade's login (router --mcp-listen, toolbus
// mcp): it calls, lists, cancels and watches events in every session on
// behalf of the hosts it authenticated, and answers the confirmations
// their users give through elicitation (and the bridged servers' questions
// of Spec.FacadeAnswers). It watches the records that
// change a session's listing. Nothing more: no JetStream administration,
// no exec, no registration, no admin verbs, no writes to any bucket.
const RoleFacade = "facade"

func facade(s bus.Subjects, answers []string) User {
	// An agent of every session, under the facade's own inbox.
	a := agent(s, "", nil)
	pub := append([]string{}, a.Permissions.Publish...)
	// The confirmations its hosts' users answer, on P.approve.<tool>
	// (docs/protocol.md 6.3): bound to the parked input's digest, rules
	// only among the suggested ones. It cannot answer external tools.
	pub = append(pub, s.Approve("*"))
	// The bridged servers' resources its hosts list and read
	// (P.resources.<server>, docs/protocol.md 12).
	pub = append(pub, s.All("resources"))
	// The bridged servers' questions its hosts' users answer (Spec.FacadeAnswers:
	// mcp__<server>__elicit only), and no other external tool.
	for _, t := range answers {
		pub = append(pub, s.Answer(t))
	}
	// The watches that tell it a session's listing may have changed:
	// ordered consumers of the KV buckets and of the skills' metadata.
	for _, b := range []string{bus.BucketSessions, bus.BucketTools, bus.BucketGroups, bus.BucketWorkers} {
		name := s.Bucket(b)
		pub = append(pub, watchStream("KV_"+name, "$KV."+name+".>")...)
	}
	skills := s.ObjectStore(bus.ObjectSkills)
	pub = append(pub, watchStream("OBJ_"+skills, "$O."+skills+".M.>")...)
	// The object store's watch first reads the latest metadata.
	pub = append(pub, jsAPI+"DIRECT.GET.OBJ_"+skills+".$O."+skills+".M.>")
	// Its own bucket of MCP tasks and request states (docs/mcp.md): read,
	// write, watch, and create it when no router has.
	mcpKV := s.Bucket(bus.BucketMCP)
	pub = append(pub, watchStream("KV_"+mcpKV, "$KV."+mcpKV+".>")...)
	pub = append(pub, "$KV."+mcpKV+".>", jsAPI+"DIRECT.GET.KV_"+mcpKV+".>",
		jsAPI+"STREAM.MSG.GET.KV_"+mcpKV, jsAPI+"STREAM.CREATE.KV_"+mcpKV)
	return User{Name: RoleFacade, Role: RoleFacade, InboxPrefix: inbox(RoleFacade), Permissions: Permissions{
		Publish:   pub,
		Subscribe: []string{s.Events("*"), inbox(RoleFacade) + ".>"},
	}}
}

// watchStream allows an ordered consumer of stream filtered on subject
// (a KV or object store watch): the stream's info, the consumer's
// creation, info and deletion, and its flow control replies.
func watchStream(stream, subject string) []string {
	return []string{jsAPI + "STREAM.INFO." + stream, createConsumer(stream, subject),
		jsAPI + "CONSUMER.INFO." + stream + ".*", jsAPI + "CONSUMER.DELETE." + stream + ".*",
		"$JS.FC." + stream + ".>"}
}
