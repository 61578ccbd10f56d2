package bus

import "strings"

// DefaultPrefix is the subject prefix P of a deployment unless configured.
const DefaultPrefix = "toolbus"

// Subjects builds the subjects, queue groups, bucket and stream names of one
// deployment. The zero value is not usable; call NewSubjects.
//
// It stays one type of one-line methods, not split by protocol section: it
// is the table of docs/protocol.md section 2 in code, read like that table
// (one name per line, in its order), and split it would scatter the table
// over several types and rename every call site, for no method that needs
// another's state.
type Subjects struct {
	Prefix string
	p      string // Prefix + "."
}

// NewSubjects returns the names for prefix ("" means DefaultPrefix).
func NewSubjects(prefix string) Subjects {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Subjects{Prefix: prefix, p: prefix + "."}
}

// The subjects of docs/protocol.md section 2, in the table's order: P.<kind>.<token>.

func (s Subjects) Call(session string) string    { return s.p + "call." + session }
func (s Subjects) Tools(session string) string   { return s.p + "tools." + session }
func (s Subjects) Cancel(session string) string  { return s.p + "cancel." + session }
func (s Subjects) Events(session string) string  { return s.p + "events." + session }
func (s Subjects) Exec(tool string) string       { return s.p + "exec." + tool }
func (s Subjects) External(tool string) string   { return s.p + "external." + tool }
func (s Subjects) Confirm(tool string) string    { return s.p + "confirm." + tool }
func (s Subjects) Answer(tool string) string     { return s.p + "answer." + tool }
func (s Subjects) Approve(tool string) string    { return s.p + "approve." + tool }
func (s Subjects) Replay(session string) string  { return s.p + "replay." + session }
func (s Subjects) Register() string              { return s.p + "register" }
func (s Subjects) Admin(verb string) string      { return s.p + "admin." + verb }
func (s Subjects) Outputs(session string) string { return s.p + "outputs." + session }
func (s Subjects) Work(tool string) string       { return s.p + "work." + tool }
func (s Subjects) Result(tool string) string     { return s.p + "result." + tool }
func (s Subjects) All(kind string) string        { return s.p + kind + ".>" } // every token of one kind

// Handoff is where a handler or approver asks a router to follow the
// handoff requests of kind ("external" or "confirm") for tool, or for every
// tool when tool is "" (P.handoff.<kind>[.<tool>], docs/protocol.md 6.2).
func (s Subjects) Handoff(kind, tool string) string {
	if tool == "" {
		return s.p + "handoff." + kind
	}
	return s.p + "handoff." + kind + "." + tool
}

// Queue groups and the durable tools' work consumers: P-<name>.

func (s Subjects) RouterQueue() string             { return s.Prefix + "-router" }
func (s Subjects) ExecQueue(tool string) string    { return s.Prefix + "-exec-" + tool }
func (s Subjects) WorkConsumer(tool string) string { return s.Prefix + "-work-" + tool }

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
	if !ok {
		return "", false
	}
	rest, ok = strings.CutPrefix(rest, kind)
	if !ok || len(rest) < 2 || rest[0] != '.' {
		return "", false
	}
	rest = rest[1:]
	if strings.IndexByte(rest, '.') >= 0 {
		return "", false
	}
	return rest, true
}
