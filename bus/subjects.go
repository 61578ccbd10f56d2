package bus

import (
	"cmp"
	"strings"
	"time"
)

// DefaultPrefix is the subject prefix P of a deployment unless configured.
const DefaultPrefix = "toolbus"

// Subjects builds the subjects, queue groups, bucket and stream names of one
// deployment (docs/protocol.md section 2, in its order). The zero value is not
// usable; call NewSubjects. Names only workers use are Workers', those of
// handoffs and answers Handoffs'.
type Subjects struct {
	Prefix string
	p      string // Prefix + "."
	// Workers are the names a worker uses (sections 5 and 7).
	Workers WorkerSubjects
	// Handoffs are the names of parked calls' handoffs and answers (section 6).
	Handoffs HandoffSubjects
}

// WorkerSubjects are the names of registering and executing tools:
// P.register.<tool>, P.register.group.<group>, 1.11's P.register, P.exec.<tool>
// and the durable tools' P.work.<tool> and P.result.<tool>.
type WorkerSubjects struct{ prefix string }

// HandoffSubjects are the names of docs/protocol.md section 6: handoff
// requests, their follow subject and the answers, and where bridges park
// their servers' questions (P.ask.<session>, section 12).
type HandoffSubjects struct{ p string }

// NewSubjects returns the names for prefix ("" means DefaultPrefix).
func NewSubjects(prefix string) Subjects {
	prefix = cmp.Or(prefix, DefaultPrefix)
	return Subjects{Prefix: prefix, p: prefix + ".", Workers: WorkerSubjects{prefix}, Handoffs: HandoffSubjects{prefix + "."}}
}

// The subjects of docs/protocol.md section 2, in the table's order: P.<kind>.<token>.

func (s Subjects) Call(session string) string          { return s.p + "call." + session }
func (h HandoffSubjects) Ask(session string) string    { return h.p + "ask." + session } // bridges' questions (1.17)
func (s Subjects) Tools(session string) string         { return s.p + "tools." + session }
func (s Subjects) Cancel(session string) string        { return s.p + "cancel." + session }
func (s Subjects) Events(session string) string        { return s.p + "events." + session }
func (w WorkerSubjects) Exec(tool string) string       { return w.prefix + ".exec." + tool }
func (h HandoffSubjects) External(tool string) string  { return h.p + "external." + tool }
func (h HandoffSubjects) Confirm(tool string) string   { return h.p + "confirm." + tool }
func (h HandoffSubjects) Answer(tool string) string    { return h.p + "answer." + tool }
func (h HandoffSubjects) Approve(tool string) string   { return h.p + "approve." + tool }
func (s Subjects) Replay(session string) string        { return s.p + "replay." + session }
func (w WorkerSubjects) Register(tool string) string   { return w.prefix + ".register." + tool }
func (w WorkerSubjects) RegisterGroup(g string) string { return w.prefix + ".register.group." + g }
func (w WorkerSubjects) SharedRegister() string        { return w.prefix + ".register" } // protocol 1.11
func (s Subjects) Admin(verb string) string            { return s.p + "admin." + verb }
func (s Subjects) Outputs(session string) string       { return s.p + "outputs." + session }
func (w WorkerSubjects) Work(tool string) string       { return w.prefix + ".work." + tool }
func (w WorkerSubjects) Result(tool string) string     { return w.prefix + ".result." + tool }
func (s Subjects) All(kind string) string              { return s.p + kind + ".>" } // every token of one kind

// Follow is where a handler or approver asks a router to follow the
// handoff requests of kind ("external" or "confirm") for tool, or for every
// tool when tool is "" (P.handoff.<kind>[.<tool>], docs/protocol.md 6.2).
func (h HandoffSubjects) Follow(kind, tool string) string {
	if tool == "" {
		return h.p + "handoff." + kind
	}
	return h.p + "handoff." + kind + "." + tool
}

// RegisterGroupToken is the token after P.register of a group's
// registration subject, P.register.group.<group> (docs/protocol.md 7.1):
// four tokens, so no tool's P.register.<tool> is one.
const RegisterGroupToken = "group"

// Registration reads a registration subject (docs/protocol.md 7.1): the tool
// of P.register.<tool>, the group of P.register.group.<group>, or shared for
// P.register; ok is false otherwise or for an invalid name.
func (w WorkerSubjects) Registration(subject string) (name string, group, shared, ok bool) {
	rest, found := strings.CutPrefix(subject, w.prefix+".register")
	switch {
	case !found:
		return "", false, false, false
	case rest == "":
		return "", false, true, true
	case rest[0] != '.':
		return "", false, false, false
	}
	rest = rest[1:]
	if g, isGroup := strings.CutPrefix(rest, RegisterGroupToken+"."); isGroup {
		rest, group = g, true
	}
	if !ValidName(rest) {
		return "", false, false, false
	}
	return rest, group, false, true
}

// Queue groups and the durable tools' work consumers: P-<name>.

func (s Subjects) RouterQueue() string                   { return s.Prefix + "-router" }
func (w WorkerSubjects) ExecQueue(tool string) string    { return w.prefix + "-exec-" + tool }
func (w WorkerSubjects) WorkConsumer(tool string) string { return w.prefix + "-work-" + tool }

// JetStream names (section 8): buckets and object stores P_<name>,
// streams with the prefix in upper case.

func (s Subjects) Bucket(name string) string      { return s.Prefix + "_" + name }
func (s Subjects) ObjectStore(name string) string { return s.Prefix + "_" + name }
func (s Subjects) Stream(name string) string      { return strings.ToUpper(s.Prefix) + "_" + name }

// Token returns the last-but-n subject token of subject after the prefix and
// kind, e.g. Token("toolbus.call.s1", "call") == "s1". It reports false when
// subject is not of that kind or holds more tokens.
func (s Subjects) Token(subject, kind string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.p)
	if ok {
		rest, ok = strings.CutPrefix(rest, kind)
	}
	if !ok || len(rest) < 2 || rest[0] != '.' || strings.IndexByte(rest[1:], '.') >= 0 {
		return "", false
	}
	return rest[1:], true
}

// QuestionTool reports whether name is a bridged server's question tool,
// mcp__<server>__elicit (docs/protocol.md 12): only a bridge parks one, on
// P.ask.<session> (since 1.17).
func QuestionTool(name string) bool {
	rest, ok := strings.CutPrefix(name, "mcp__")
	server, ok2 := strings.CutSuffix(rest, "__elicit")
	return ok && ok2 && server != ""
}

// AskPrefix starts the reply id of every batch on P.ask.<session> and of
// no batch on P.call.<session> (docs/protocol.md 3.1, 12; since 1.18): no
// batch can be a copy of one of the other subject.
const AskPrefix = "toolbus_ask_"

// AskedReply reports whether replyID is a bridge's question's, whose
// parks say "asked" wherever a router lists them.
func AskedReply(replyID string) bool { return strings.HasPrefix(replyID, AskPrefix) }

// ValidID reports whether s may be a session id, reply id or tool call id:
// ^[A-Za-z0-9_-]{1,128}$. Such identifiers become subject tokens and KV keys.
func ValidID(s string) bool { return validToken(s, 128) }

// ValidName reports whether s may be a tool or group name:
// ^[A-Za-z0-9_-]{1,64}$, the common subset of OpenAI, Anthropic and MCP.
func ValidName(s string) bool { return validToken(s, 64) }

// RouterTool reports whether name is a tool the router lists itself
// (docs/protocol.md 4.3, 10): reset_tools, search_tools, the skills'
// load_skill_through_path and Skill. A worker may not register one (7.1).
func RouterTool(name string) bool {
	switch name {
	case "reset_tools", "search_tools", "load_skill_through_path", "Skill":
		return true
	}
	return false
}

func validToken(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Defaults of the JetStream resources.
const (
	DefaultHeartbeat    = 5 * time.Second
	DefaultDedupeWindow = 10 * time.Minute
	DefaultSessionTTL   = 24 * time.Hour
	DefaultEventsMaxAge = 24 * time.Hour
	DefaultHandoffTTL   = 7 * 24 * time.Hour
	// DefaultOutputsTTL is how long a stored output (docs/protocol.md 5.9) is
	// kept: as long as the events that refer to it.
	DefaultOutputsTTL = 24 * time.Hour
	// MCPStateMaxAge bounds how long the MCP facade's task records and
	// request states are kept (BucketMCP's max age).
	MCPStateMaxAge = 24 * time.Hour
)

// Bucket and stream names, before the prefix.
const (
	BucketTools    = "tools"
	BucketWorkers  = "workers"
	BucketGroups   = "groups"
	BucketSessions = "sessions"
	BucketParked   = "parked"
	BucketLedger   = "ledger"
	BucketMCP      = "mcp"     // the MCP facade's tasks and request states
	BucketRouters  = "routers" // the routers' presence (1.13)
	StreamEvents   = "EVENTS"
	StreamWork     = "WORK"
	ObjectSkills   = "skills"
	ObjectOutputs  = "outputs"
)
