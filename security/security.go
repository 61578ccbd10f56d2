// Package security builds the NATS permissions of toolbus' roles from
// bus.Subjects, so the authorization never drifts from the wire, and renders
// them for nats-server, nsc or `router --secure` (docs/security.md).
package security

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/bus"
)

// Roles.
const (
	RoleRouter   = "router"
	RoleWorker   = "worker"
	RoleAgent    = "agent"   // every session
	RoleSession  = "session" // one session's agent
	RoleHandler  = "handler"
	RoleApprover = "approver"
	RoleOperator = "operator"
	// RoleFacade is the MCP facade's login: it acts in every session for
	// its authenticated hosts and answers their confirmations (and
	// Spec.FacadeAnswers), with no JetStream administration, exec,
	// registration or admin verbs.
	RoleFacade = "facade"
	// RoleBridge is the login of a worker that bridges MCP servers
	// (toolworker --mcp-config): the unconfined worker's permissions, plus
	// what its servers' questions and sampling need in every session, and
	// alone of all roles but the router's P.ask.* (docs/protocol.md 12, 1.17).
	RoleBridge = "bridge"
)

// Permissions is one user's NATS subject permissions.
type Permissions struct {
	Publish   []string `json:"publish"`
	Subscribe []string `json:"subscribe"`
	// AllowResponses lets the user reply once to a request it received
	// (within NATS' two minutes) where Publish does not name the subject.
	AllowResponses bool `json:"allow_responses,omitempty"`
	// PublishDeny and SubscribeDeny take subjects out of the allow lists.
	PublishDeny   []string `json:"publish_deny,omitempty"`
	SubscribeDeny []string `json:"subscribe_deny,omitempty"`
}

// User is one login of a role.
type User struct {
	// Name is the user name (and the file name of its generated secrets):
	// the role's name, "session-<id>" for one session's agent,
	// "handler-<name>" for an external handler.
	Name string `json:"name"`
	Role string `json:"role"`
	// Account is the user's NATS account (accountOf: the main account, or one per tool runner login).
	Account string `json:"account"`
	// Session is the one session of a RoleSession user.
	Session string `json:"session,omitempty"`
	// User is the toolbus user a RoleSession user is bound to: the
	// router gives the session's batches this user, whatever they claim
	// (docs/security.md "Identities").
	User string `json:"user,omitempty"`
	// Tools are the tools of a handler, approver or worker; empty means
	// every tool (a worker or approver only; a handler always has tools).
	Tools []string `json:"tools,omitempty"`
	// InboxPrefix is the prefix the user's connection must use for its
	// reply subjects (natsconn.Config.InboxPrefix, --inbox-prefix); the
	// user may subscribe below it only, so nobody reads others' replies.
	InboxPrefix string      `json:"inbox_prefix"`
	Permissions Permissions `json:"permissions"`
}

// Handler is one external handler login and the tools it answers.
type Handler struct {
	Name  string   `json:"name"`
	Tools []string `json:"tools"`
}

// Spec says which users to build.
type Spec struct {
	// Prefix is the deployment's subject prefix; "" means bus.DefaultPrefix.
	Prefix string `json:"prefix,omitempty"`
	// Sessions adds one agent user per session id, confined to it. The
	// shared agent user may then neither act in nor read these sessions.
	Sessions []string `json:"sessions,omitempty"`
	// Bind binds sessions of Sessions to toolbus users (session → user):
	// a router with identities runs the session's batches as that user.
	Bind map[string]string `json:"bind,omitempty"`
	// Handlers adds one user per external handler.
	Handlers []Handler `json:"handlers,omitempty"`
	// Workers adds one worker login per entry, worker-<name>, confined to
	// its tools and alone in an account of its own, so that one worker
	// process can neither read nor answer another's calls (docs/security.md
	// "Accounts").
	Workers []Handler `json:"workers,omitempty"`
	// WorkerTools, when set, confines the worker user to these tools.
	WorkerTools []string `json:"worker_tools,omitempty"`
	// WorkerGroups are the groups a worker confined by WorkerTools may
	// define (P.register.group.<g>); empty means none. A worker of every
	// tool defines every group.
	WorkerGroups []string `json:"worker_groups,omitempty"`
	// WorkerSharedRegister lets workers publish on 1.11's shared P.register
	// during a rolling update only (docs/protocol.md 14, 1.12): it reopens
	// the gap per-tool subjects close.
	WorkerSharedRegister bool `json:"worker_shared_register,omitempty"`
	// ApproverTools, when set, confines the approver to these tools'
	// confirmations; empty means every tool.
	ApproverTools []string `json:"approver_tools,omitempty"`
	// AgentAnswers are the request-scoped tools agents may answer
	// (docs/protocol.md 4.3). NATS cannot tell sessions apart on
	// P.answer.<tool>: never list a registered or confirmed tool.
	AgentAnswers []string `json:"agent_answers,omitempty"`
	// FacadeAnswers are the bridged question tools (mcp__<server>__elicit)
	// the facade may answer.
	FacadeAnswers []string `json:"facade_answers,omitempty"`
}

// jsAPI is the JetStream API prefix of the account.
const jsAPI = "$JS.API."

// Users returns the users of spec: router, worker, agent, approver,
// operator, facade, bridge, then one per session and one per handler, in
// that order.
func Users(spec Spec) ([]User, error) {
	s := bus.NewSubjects(spec.Prefix)
	if err := check(spec); err != nil {
		return nil, err
	}
	shared := agent(s, "", spec.AgentAnswers)
	var sessions []User
	for _, id := range spec.Sessions {
		// The session has its own agent user: the shared agent may neither
		// publish in it nor receive its events.
		p := &shared.Permissions
		p.PublishDeny = append(p.PublishDeny, s.Call(id), s.Tools(id), s.Cancel(id), s.Replay(id), s.Outputs(id), s.Tasks(id))
		p.SubscribeDeny = append(p.SubscribeDeny, s.Events(id))
		u := agent(s, id, spec.AgentAnswers)
		u.User = spec.Bind[id]
		sessions = append(sessions, u)
	}
	users := []User{router(s), worker(s, spec.WorkerTools, spec.WorkerGroups, spec.WorkerSharedRegister), shared, approver(s, spec.ApproverTools), operator(s), facade(s, spec.FacadeAnswers), bridge(s)}
	users = append(users, sessions...)
	for _, h := range spec.Handlers {
		users = append(users, handler(s, h))
	}
	for _, h := range spec.Workers {
		u := worker(s, h.Tools, nil, false)
		u.Name, u.InboxPrefix = RoleWorker+"-"+h.Name, inbox(RoleWorker+"-"+h.Name)
		u.Permissions.Subscribe[slices.Index(u.Permissions.Subscribe, inbox(RoleWorker)+".>")] = u.InboxPrefix + ".>"
		users = append(users, u)
	}
	for i := range users {
		users[i].Account = accountOf(cmp.Or(spec.Prefix, bus.DefaultPrefix), users[i])
	}
	return users, nil
}

func check(spec Spec) error {
	if spec.Prefix != "" && strings.ContainsAny(spec.Prefix, ".*> \t\r\n") {
		return fmt.Errorf("security: prefix %q must be one subject token", spec.Prefix)
	}
	seen := map[string]bool{}
	for _, id := range spec.Sessions {
		if !bus.ValidID(id) {
			return fmt.Errorf("security: session %q must match ^[A-Za-z0-9_-]{1,128}$", id)
		}
		if seen[id] {
			return fmt.Errorf("security: session %q given twice", id)
		}
		seen[id] = true
	}
	for id, user := range spec.Bind {
		if !seen[id] {
			return fmt.Errorf("security: session %q is bound to user %q but has no agent user (add it to the sessions)", id, user)
		}
		if user == "" || len(user) > 256 || strings.ContainsAny(user, "\x00\r\n") {
			return fmt.Errorf("security: session %q: user %q must be 1 to 256 characters, without NUL or line breaks", id, user)
		}
	}
	names := map[string]bool{}
	for i, h := range slices.Concat(spec.Handlers, spec.Workers) {
		what := "handler"
		if i >= len(spec.Handlers) {
			what = "worker"
		}
		if !bus.ValidName(h.Name) {
			return fmt.Errorf("security: %s name %q must match ^[A-Za-z0-9_-]{1,64}$", what, h.Name)
		}
		if names[what+h.Name] {
			return fmt.Errorf("security: %s %q given twice", what, h.Name)
		}
		names[what+h.Name] = true
		if len(h.Tools) == 0 {
			return fmt.Errorf("security: %s %q needs at least one tool", what, h.Name)
		}
		if err := checkTools(what+" "+h.Name, h.Tools); err != nil {
			return err
		}
	}
	if len(spec.WorkerGroups) > 0 && len(spec.WorkerTools) == 0 {
		return fmt.Errorf("security: worker groups are for a worker confined to some tools (a worker of every tool defines every group)")
	}
	for what, tools := range map[string][]string{"worker": spec.WorkerTools, "worker groups": spec.WorkerGroups, "approver": spec.ApproverTools, "agent answers": spec.AgentAnswers,
		"facade answers": spec.FacadeAnswers} {
		if err := checkTools(what, tools); err != nil {
			return err
		}
	}
	for _, t := range spec.FacadeAnswers {
		if !bus.QuestionTool(t) {
			return fmt.Errorf("security: facade answers: %q is not a bridged server's question tool (mcp__<server>__elicit)", t)
		}
	}
	return nil
}

func checkTools(what string, tools []string) error {
	if i := slices.IndexFunc(tools, func(t string) bool { return !bus.ValidName(t) }); i >= 0 {
		return fmt.Errorf("security: %s: tool name %q must match ^[A-Za-z0-9_-]{1,64}$", what, tools[i])
	}
	return nil
}

// RouterInbox is the inbox prefix every router of a secured deployment
// uses: workers may send their results there.
const RouterInbox = "_INBOX." + RoleRouter

// inbox is the inbox prefix of user name.
func inbox(name string) string { return "_INBOX." + name }

// each returns f(t) for each tool, or f("*") when tools is empty.
func each(tools []string, f func(string) string) []string {
	if len(tools) == 0 {
		return []string{f("*")}
	}
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = f(t)
	}
	return out
}

// followHandoff allows following kind's handoff for tools through a router
// (docs/protocol.md 6.2), with no JetStream API.
func followHandoff(s bus.Subjects, kind string, tools []string) []string {
	if len(tools) == 0 {
		return []string{s.Handoffs.Follow(kind, ""), s.Handoffs.Follow(kind, "*")}
	}
	return each(tools, func(t string) string { return s.Handoffs.Follow(kind, t) })
}

func router(s bus.Subjects) User {
	// The router is the trusted component: it creates every bucket and
	// stream, writes every record, answers every request; workers send
	// results to its inbox prefix, so it must use it.
	return User{Name: RoleRouter, Role: RoleRouter, InboxPrefix: inbox(RoleRouter), Permissions: Permissions{
		// "_R_.>": the reply subjects the server gives the workers' requests
		// (links), which no client may choose.
		Publish:   []string{s.Prefix + ".>", "$JS.>", "$KV.>", "$O.>", "_INBOX.>", "$SRV.>", "_R_.>"},
		Subscribe: []string{s.Prefix + ".>", "_INBOX.>", "$SRV.>"},
	}}
}

func worker(s bus.Subjects, tools, groups []string, shared bool) User {
	// Results and progress go to the routers' inboxes (allow_responses
	// forgets a request after two minutes, less than a tool's timeout),
	// never to a session's events, which only routers publish (protocol
	// 1.18); durable calls come from work consumers, their results on
	// P.result.<tool>.
	// A confined worker takes its tools' execs in their queue groups only
	// (protocol 5.1), so another process of the login is delivered none of
	// those it is sent, nor learns their reply subjects; the worker of every
	// tool cannot be pinned so (a queue pattern cannot follow the subject).
	sub := each(tools, func(t string) string {
		if t == "*" {
			return s.Workers.Exec(t)
		}
		return s.Workers.Exec(t) + " " + s.Workers.ExecQueue(t)
	})
	sub = append(sub, s.All("cancel"), "$SRV.>", inbox(RoleWorker)+".>")
	if len(tools) == 0 {
		// A bridge (mcp/bridge) serves its MCP servers' resources on
		// P.resources.<server> (docs/protocol.md 12); a worker confined to
		// some tools serves no resources.
		sub = append(sub, s.All("resources"))
	}
	work := s.Stream(bus.StreamWork)
	consumer := func(t string) string { // a wildcard must be a whole token
		if t == "*" {
			return "*"
		}
		return s.Workers.WorkConsumer(t)
	}
	// Registration on its tools' subjects only (docs/protocol.md 7.1).
	pub := each(tools, s.Workers.Register)
	if len(tools) == 0 {
		pub = append(pub, s.Workers.RegisterGroup("*"))
	}
	for _, g := range groups {
		pub = append(pub, s.Workers.RegisterGroup(g))
	}
	if shared { // the upgrade window of 1.12: workers of 1.11 still register here
		pub = append(pub, s.Workers.SharedRegister())
	}
	pub = append(pub, inbox(RoleRouter)+".>")
	pub = append(pub, each(tools, s.Workers.Result)...)
	pub = append(pub, each(tools, func(t string) string { return jsAPI + "CONSUMER.MSG.NEXT." + work + "." + consumer(t) })...)
	pub = append(pub, each(tools, func(t string) string { return jsAPI + "CONSUMER.INFO." + work + "." + consumer(t) })...)
	pub = append(pub, each(tools, func(t string) string { return "$JS.ACK." + work + "." + consumer(t) + ".>" })...)
	pub = append(pub, outputsWrite(s)...)
	return User{Name: RoleWorker, Role: RoleWorker, Tools: tools, InboxPrefix: inbox(RoleWorker), Permissions: Permissions{
		Publish:        pub,
		Subscribe:      sub,
		AllowResponses: true,
	}}
}

// outputsWrite allows publishing object chunks and metadata to the outputs
// store (protocol 5.9), with no JetStream API: a writer can neither read
// nor list objects.
func outputsWrite(s bus.Subjects) []string {
	b := s.ObjectStore(bus.ObjectOutputs)
	return []string{"$O." + b + ".C.>", "$O." + b + ".M.>"}
}

func agent(s bus.Subjects, session string, answers []string) User {
	name, role, tok := RoleAgent, RoleAgent, "*"
	if session != "" {
		name, role, tok = "session-"+session, RoleSession, session
	}
	// Replay goes through a router on P.replay.<s>: an agent has no
	// JetStream API, which cannot be confined to a session (docs/security.md).
	pub := []string{s.Call(tok), s.Tools(tok), s.Cancel(tok), s.Replay(tok), s.Tasks(tok)}
	for _, t := range answers {
		pub = append(pub, s.Handoffs.Answer(t))
	}
	// The stored outputs of the session through the routers' verb on
	// P.outputs.<session>: nothing on the object store itself.
	pub = append(pub, s.Outputs(tok))
	if len(answers) > 0 {
		pub = append(pub, outputsWrite(s)...) // a large answer is stored
	}
	return User{Name: name, Role: role, Session: session, InboxPrefix: inbox(name), Permissions: Permissions{
		Publish:   pub,
		Subscribe: []string{s.Events(tok), inbox(name) + ".>"},
	}}
}

func handler(s bus.Subjects, h Handler) User {
	name := "handler-" + h.Name
	var pub, sub []string
	for _, t := range h.Tools {
		pub = append(pub, s.Handoffs.Answer(t))
		sub = append(sub, s.Handoffs.External(t))
	}
	// Its tools' stored requests through a router (no JetStream API).
	pub = append(pub, followHandoff(s, "external", h.Tools)...)
	pub = append(pub, outputsWrite(s)...)
	sub = append(sub, inbox(name)+".>")
	return User{Name: name, Role: RoleHandler, Tools: h.Tools, InboxPrefix: inbox(name), Permissions: Permissions{Publish: pub, Subscribe: sub}}
}

func approver(s bus.Subjects, tools []string) User {
	// Confirmations only, on their own subject, and their handoff through a router.
	pub := each(tools, s.Handoffs.Approve)
	pub = append(pub, followHandoff(s, "confirm", tools)...)
	// The inbox reads through a router's parked.list (docs/inbox.md): a
	// message get would reach any subject, other calls' results included.
	pub = append(pub, s.Admin("parked.list"))
	sub := append(each(tools, s.Handoffs.Confirm), inbox(RoleApprover)+".>")
	return User{Name: RoleApprover, Role: RoleApprover, Tools: tools, InboxPrefix: inbox(RoleApprover), Permissions: Permissions{Publish: pub, Subscribe: sub}}
}

func operator(s bus.Subjects) User {
	// The operator runs every toolbus command: admin verbs, calls and
	// answers, watching, the handoff streams and the skills object store.
	// It may not execute tools directly nor register as a worker.
	return User{Name: RoleOperator, Role: RoleOperator, InboxPrefix: inbox(RoleOperator), Permissions: Permissions{
		Publish: []string{s.All("admin"), s.All("call"), s.All("tools"), s.All("cancel"), s.All("answer"), s.All("approve"), s.All("replay"), s.All("outputs"),
			s.All("tasks"), s.All("handoff"), "$JS.API.>", "$O." + s.ObjectStore(bus.ObjectSkills) + ".>", "$O." + s.ObjectStore(bus.ObjectOutputs) + ".>", "$SRV.>",
			"$JS.FC.OBJ_" + s.ObjectStore(bus.ObjectOutputs) + ".>"}, // flow control of `nats object get`'s ordered consumer
		Subscribe: []string{s.All("events"), s.All("external"), s.All("confirm"), inbox(RoleOperator) + ".>"},
		// Presence is the routers' alone (docs/protocol.md 8): a deleted key
		// makes the others take a router for gone.
		PublishDeny: presenceAdmin(s),
	}}
}

// presenceAdmin is the JetStream API that removes keys of the routers'
// presence or the bucket itself.
func presenceAdmin(s bus.Subjects) []string {
	stream := "KV_" + s.Bucket(bus.BucketRouters)
	return []string{jsAPI + "STREAM.PURGE." + stream, jsAPI + "STREAM.MSG.DELETE." + stream, jsAPI + "STREAM.DELETE." + stream, jsAPI + "STREAM.UPDATE." + stream}
}

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

func bridge(s bus.Subjects) User {
	// A worker of every tool (its servers' tools, their resources) that
	// asks in every session, as the facade acts in every session: its
	// servers' questions on P.ask.<s>, which nobody else may publish, so a
	// question parked there is the bridge's (docs/protocol.md 12, 1.17);
	// sampling as a call on P.call.<s>; the events of its questions and the
	// cancel that withdraws one.
	w := worker(s, nil, nil, false)
	w.Name, w.Role, w.InboxPrefix = RoleBridge, RoleBridge, inbox(RoleBridge)
	p := &w.Permissions
	p.Publish = append(p.Publish, s.Handoffs.Ask("*"), s.Call("*"), s.Cancel("*"))
	mine := slices.Index(p.Subscribe, inbox(RoleWorker)+".>")
	p.Subscribe[mine] = inbox(RoleBridge) + ".>"
	p.Subscribe = append(p.Subscribe, s.Events("*"))
	return w
}

// Lookup returns the user named name.
func Lookup(users []User, name string) (User, bool) {
	i := slices.IndexFunc(users, func(u User) bool { return u.Name == name })
	if i < 0 {
		return User{}, false
	}
	return users[i], true
}

// accountOf is the NATS account of login u where main is the main account
// (the prefix): each login that runs tools, worker, worker-<name> and
// bridge, in one of its own, <main>-<login>, every other in main. NATS
// checks no permission on a reply subject, and JetStream answers a request
// there with the server's rights: what a worker has JetStream (or anyone)
// answer lands in its own account, never on P.events.> or another subject of
// the main account, nor on another worker login's (docs/security.md "Accounts").
func accountOf(main string, u User) string {
	if u.Role == RoleWorker || u.Role == RoleBridge {
		return main + "-" + u.Name
	}
	return main
}

// link is one subject the main account shares with the tool runners'.
type link struct {
	kind, subject string // kind: "stream" or "service"
	many          bool   // answered by several messages
	wait          string // how long an answer may come, instead of NATS' two minutes
}

// imports are what the account of tool runner u imports of links: the
// streams its login may read, and as services only the subjects it may
// publish on (and the inboxes of the requests it answers). The server passes
// an answer that reaches a service import on through it, whatever the
// permissions: a worker naming P.register as a request's reply had the answer
// published there in the main account while its account imported P.register
// (docs/security.md "Accounts").
func imports(prefix string, u User) []link {
	var out []link
	p := u.Permissions
	for _, l := range links(bus.NewSubjects(prefix)) {
		if l.kind == "stream" && slices.ContainsFunc(p.Subscribe, func(s string) bool { return strings.HasPrefix(s, strings.TrimSuffix(l.subject, ">")) }) {
			out = append(out, l)
		}
	}
	// $JS.API.INFO, which no runner may publish, keeps nats-server from giving the
	// account its own $JS.API.> import, whose 503 (no JetStream) answered each
	// CONSUMER.INFO before the main account (docs/security.md "Accounts").
	for _, subj := range slices.Concat(p.Publish, []string{inbox(RoleOperator) + ".>", inbox(RoleFacade) + ".>", jsAPI + "INFO"}) {
		out = append(out, link{kind: "service", subject: subj})
	}
	return out
}

// links are what the main account exports to the tool runners' accounts
// (accountOf), which import of them what imports says. Streams reach the runners as published, reply
// subject included: exec requests, cancels, resource requests, events (the
// bridge's) and $SRV pings. Services are what runners publish into the main
// account: the reply subject there is the server's own (_R_.…), whose
// answers go back to the runner's account only, so a worker's request with
// reply P.events.s1 is answered on its own account's P.events.s1, which
// nothing exports. The inboxes are those whose requests runners answer.
func links(s bus.Subjects) []link {
	var out []link
	for _, subj := range []string{s.All("exec"), s.All("cancel"), s.All("resources"), s.All("events"), "$SRV.>"} {
		out = append(out, link{kind: "stream", subject: subj})
	}
	work, obj := s.Stream(bus.StreamWork), s.ObjectStore(bus.ObjectOutputs)
	// The bridge's cancels on P.cancel.* (P.cancel.> is a stream import).
	for _, subj := range []string{s.Workers.SharedRegister(), s.All("register"), s.All("result"), s.Cancel("*"),
		jsAPI + "INFO", jsAPI + "CONSUMER.INFO." + work + ".*", "$JS.ACK." + work + ".>", "$O." + obj + ".C.>", "$O." + obj + ".M.>"} {
		out = append(out, link{kind: "service", subject: subj})
	}
	// What runners send to these inboxes is itself an answer, never answered:
	// the server keeps a request's way back (a few hundred bytes) until
	// answered or the threshold, so a worker's flood with replies is held 1 s.
	for _, r := range []string{RoleRouter, RoleOperator, RoleFacade} {
		out = append(out, link{kind: "service", subject: inbox(r) + ".>", wait: "1s"})
	}
	// A pull is answered by messages and statuses; a bridge's batch when its
	// calls end (a tool's timeout is 5 min by default, a park's 24 h).
	return append(out, link{kind: "service", subject: jsAPI + "CONSUMER.MSG.NEXT." + work + ".*", many: true},
		link{kind: "service", subject: s.All("call"), wait: "24h"}, link{kind: "service", subject: s.All("ask"), wait: "24h"})
}
