// Package bus is the wire contract of toolbus in one place: the CloudEvent ⇄
// NATS message mapping, subject builders, event types, error codes,
// identifier rules, the JSON shapes of every event's data, and the names and
// defaults of the JetStream buckets and streams (docs/bus.md). The codec is
// hand-written over a plain struct, checked against sdk-go in the tests.
package bus

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Call is one tool call of a model turn. Input is a JSON object, or a JSON
// string that holds one (as OpenAI returns arguments).
type Call struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
	// Background asks that the call go on as a background task when it
	// reaches its timeout (docs/protocol.md 5.10).
	Background bool `json:"background,omitempty"`
}

// Batch is the data of io.toolbus.call.batch.
type Batch struct {
	Calls   []Call          `json:"calls"`
	User    json.RawMessage `json:"user,omitempty"`
	Context json.RawMessage `json:"context,omitempty"`
	Request *Request        `json:"request,omitempty"`
	// Events is EventsCalls for a call.result event per call beside
	// batch.done; "" (or EventsBatch) stores only batch.done for the calls
	// whose results come back in the reply (docs/protocol.md 3.4).
	Events string `json:"events,omitempty"`
	// SessionRev is the session revision of an earlier reply or listing,
	// sent back so that a router may skip the session's read (4.2); 0: absent.
	SessionRev uint64 `json:"sessionrev,omitempty"`
}

// Values of Batch.Events.
const (
	EventsBatch = "batch" // the default: batch.done carries the results given in the reply
	EventsCalls = "calls" // a call.result per call as well
)

// Request is the request-scoped tool configuration of a batch or a query.
type Request struct {
	MergeMode     string         `json:"merge_mode,omitempty"`
	ExternalTools []ExternalTool `json:"external_tools,omitempty"`
}

// ExternalTool is a schema-only tool that the caller executes itself.
type ExternalTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Reply is the data of io.toolbus.call.reply.
type Reply struct {
	Results []Result `json:"results"`
	Parked  []Parked `json:"parked"`
	// SessionRev is the session record's KV revision as the router knew it
	// when it replied; 0 (absent) when the session is not stored.
	SessionRev uint64 `json:"sessionrev,omitempty"`
}

// Parked describes a call that waits for an answer on Subject.
type Parked struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
	// InputOmitted (since 1.19): the input did not fit in the message;
	// InputDigest is then its digest, and parked.list lists it (3.2).
	InputOmitted   bool   `json:"input_omitted,omitempty"`
	InputDigest    string `json:"input_digest,omitempty"`
	Kind           string `json:"kind"`
	Subject        string `json:"subject"`
	SuggestedRules []Rule `json:"suggested_rules,omitempty"`
	// Asked is set by a router only for a call of a batch that came on
	// P.ask.<session>, a bridge's question (docs/protocol.md 12, 1.17).
	Asked bool `json:"asked,omitempty"`
}

// Rule is a permission rule: Tool alone, or Tool with a command or path
// pattern matched by the tool's rule matcher.
type Rule struct {
	Tool     string `json:"tool"`
	Pattern  string `json:"pattern,omitempty"`
	Behavior string `json:"behavior,omitempty"` // allow, deny or ask
}

// Result is the outcome of one call.
type Result struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	State    string          `json:"state"`
	Output   []Block         `json:"output"`
	Error    *ResultError    `json:"error,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Task is the handle of a result in state "background".
	Task *TaskHandle `json:"task,omitempty"`
}

// ResultError is the machine-readable part of an error result.
type ResultError struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Details []Detail `json:"details,omitempty"`
	// RetryAfterMS, on a limit_exceeded result of a rate or budget, is how
	// long to wait before the same call can run (docs/protocol.md 3.3).
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// Detail is one problem found in a call's input.
type Detail struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Block is one piece of output the model reads: a text block, or a data block
// that holds exactly one of Data (base64) and URL; Size is the length of what
// a URL refers to (docs/protocol.md 5.9). URI, Name, Title, Description and
// Annotations describe where a block came from and how it is meant, as MCP's
// embedded resources and resource links do (docs/protocol.md 3.3).
type Block struct {
	Type        string       `json:"type"`
	Text        string       `json:"text,omitempty"`
	MediaType   string       `json:"media_type,omitempty"`
	Data        string       `json:"data,omitempty"`
	URL         string       `json:"url,omitempty"`
	Size        int64        `json:"size,omitempty"`
	URI         string       `json:"uri,omitempty"`
	Name        string       `json:"name,omitempty"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description,omitempty"`
	Annotations *Annotations `json:"annotations,omitempty"`
}

// Annotations describe a block's content as MCP content annotations do
// (docs/protocol.md 3.3): audience, priority from 0 to 1, last modification.
type Annotations struct {
	Audience     []string `json:"audience,omitempty"`
	Priority     *float64 `json:"priority,omitempty"`
	LastModified string   `json:"last_modified,omitempty"`
}

// Audiences of Annotations.
const (
	AudienceUser      = "user"
	AudienceAssistant = "assistant"
)

// Check reports the first value of a that docs/protocol.md 3.3 does not allow:
// an audience other than user or assistant, a priority outside [0, 1], a
// last_modified that is not RFC 3339. A nil a is fine.
func (a *Annotations) Check() error {
	if a == nil {
		return nil
	}
	for _, r := range a.Audience {
		if r != AudienceUser && r != AudienceAssistant {
			return fmt.Errorf("annotations.audience: %q is not user or assistant", r)
		}
	}
	if a.Priority != nil && !(*a.Priority >= 0 && *a.Priority <= 1) {
		return fmt.Errorf("annotations.priority: %v is not between 0 and 1", *a.Priority)
	}
	if a.LastModified != "" {
		if _, err := time.Parse(time.RFC3339Nano, a.LastModified); err != nil {
			return fmt.Errorf("annotations.last_modified: %q is not an RFC 3339 time", a.LastModified)
		}
	}
	return nil
}

// Block types.
const (
	BlockText = "text"
	BlockData = "data"
)

// MarshalJSON writes the block by hand (blocks are encoded on every call);
// a text block always has "text", even when empty.
func (b Block) MarshalJSON() ([]byte, error) {
	return b.appendJSON(make([]byte, 0, 32+len(b.Text)+len(b.Data)+len(b.URL)))
}

// appendJSON appends the block as MarshalJSON writes it.
func (b *Block) appendJSON(out []byte) ([]byte, error) {
	out = appendField(out, `{"type":`, b.Type)
	if b.Text != "" || b.Type == BlockText {
		out = appendField(out, `,"text":`, b.Text)
	}
	out = appendAttr(out, `,"media_type":`, b.MediaType)
	out = appendAttr(out, `,"data":`, b.Data)
	out = appendAttr(out, `,"url":`, b.URL)
	if b.Size != 0 {
		out = append(out, `,"size":`...)
		out = strconv.AppendInt(out, b.Size, 10)
	}
	out = appendAttr(out, `,"uri":`, b.URI)
	out = appendAttr(out, `,"name":`, b.Name)
	out = appendAttr(out, `,"title":`, b.Title)
	out = appendAttr(out, `,"description":`, b.Description)
	if b.Annotations != nil {
		a, err := json.Marshal(b.Annotations)
		if err != nil {
			return nil, err
		}
		out = append(out, `,"annotations":`...)
		out = append(out, a...)
	}
	return append(out, '}'), nil
}

// Text returns a single text block.
func Text(s string) []Block { return []Block{{Type: BlockText, Text: s}} }

// ErrorResult returns an error result whose text is msg and whose code is code.
func ErrorResult(c Call, code, msg string, details ...Detail) Result {
	state := StateError
	switch code {
	case CodeDenied:
		state = StateDenied
	case CodeInterrupted:
		state = StateInterrupted
	}
	return Result{ID: c.ID, Name: c.Name, State: state, Output: Text(msg),
		Error: &ResultError{Code: code, Message: msg, Details: details}}
}

// ExecRequest is the data of io.toolbus.exec.
type ExecRequest struct {
	Call    Call            `json:"call"`
	User    json.RawMessage `json:"user"`
	Context json.RawMessage `json:"context"`
	Attempt int             `json:"attempt"`
	// ProgressReply: the router takes the call's progress on the exec's
	// reply subject + ProgressSuffix, not on P.events (docs/protocol.md 5.3, 1.18).
	ProgressReply bool `json:"progress_reply,omitempty"`
	// ProgressInbox is a durable call's (which has no reply subject): the
	// router takes its progress on ProgressInbox + ProgressSuffix (5.8, 1.18).
	ProgressInbox string          `json:"progress_inbox,omitempty"`
	State         json.RawMessage `json:"state,omitempty"`
}

// ProgressSuffix is appended to an exec's reply subject to make the
// subject its progress goes to when the exec says progress_reply (1.18).
const ProgressSuffix = ".progress"

// RunningSuffix is appended to a batch's reply subject to make the subject
// of its running notices (docs/protocol.md 3.2.1, 1.25).
const RunningSuffix = ".running"

// MaxProgress is the most bytes of an io.toolbus.call.progress message's
// body: a router drops a larger one unread, a worker refuses to send it
// (docs/protocol.md 5.3, 1.19).
const MaxProgress = 64 << 10

// ExecResult is the data of io.toolbus.exec.result.
type ExecResult struct {
	State      string          `json:"state"`
	Output     []Block         `json:"output"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	StatePatch json.RawMessage `json:"state_patch,omitempty"`
	// Cancel, on an interrupted result, is the id of the cancel event that
	// made the worker end the call (protocol 3.5, 1.30): the router holds
	// the batch's next run until it has handled that cancel itself.
	Cancel string `json:"cancel,omitempty"`
}

// Progress is the data of io.toolbus.call.progress.
type Progress struct {
	Seq    int     `json:"seq"`
	Output []Block `json:"output"`
}

// ParkedEvent is the data of io.toolbus.call.parked.
type ParkedEvent struct {
	Calls []Parked `json:"calls"`
}

// BatchDone is the data of io.toolbus.batch.done.
type BatchDone struct {
	Results []Result `json:"results"`
}

// Cancel is the data of io.toolbus.call.cancel; no Calls means every call of
// the reply id.
type Cancel struct {
	Calls []string `json:"calls,omitempty"`
	// Task names the background task whose run a router stops (3.5); the
	// batches of its reply id are left alone.
	Task string `json:"task,omitempty"`
}

// ToolsQuery is the data of io.toolbus.tools.query.
type ToolsQuery struct {
	Request *Request `json:"request,omitempty"`
	Format  string   `json:"format,omitempty"`
	// User selects the skills visible to that user (docs/protocol.md 10).
	User json.RawMessage `json:"user,omitempty"`
	// Deferred also lists the tools of the inactive meta groups for the
	// provider's own tool search (4.1; openai-responses and anthropic).
	Deferred bool `json:"deferred,omitempty"`
}

// ToolsList is the data of io.toolbus.tools.list.
type ToolsList struct {
	Tools        []json.RawMessage `json:"tools"`
	Groups       []GroupInfo       `json:"groups"`
	SkillsPrompt string            `json:"skills_prompt"`
	// SessionRev is the session record's KV revision the listing was made
	// from; 0 (absent) when the session is not stored.
	SessionRev uint64 `json:"sessionrev,omitempty"`
	// Deferred maps each deferred tool to the group it is listed in (and
	// that a load of it activates), for a query with deferred set.
	Deferred map[string]string `json:"deferred,omitempty"`
}

// GroupInfo is a group as listed for a session.
type GroupInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Scope       string `json:"scope"`
	Active      bool   `json:"active"`
}

// Register is the data of io.toolbus.register.
type Register struct {
	Worker  string    `json:"worker"`
	Groups  []Group   `json:"groups,omitempty"`
	Tools   []ToolDef `json:"tools,omitempty"`
	Leaving bool      `json:"leaving,omitempty"`
	// BinaryExec says the worker takes io.toolbus.exec in binary mode as
	// well and answers each request in the mode it came in (5.1).
	BinaryExec bool `json:"binary_exec,omitempty"`
	// CompactExec, only with BinaryExec, says the worker takes the compact
	// binary form as well and answers it in the compact form (1.16).
	CompactExec bool `json:"compact_exec,omitempty"`
	// InFlight lists, per tool, the calls the worker is running (CallKey
	// values; docs/protocol.md 7): a worker that sends it, even empty,
	// lists every call it runs; nil means it does not report them.
	InFlight map[string][]string `json:"inflight"`
	// Refused lists the definitions UnmarshalJSON could not decode, with
	// the reason the registry rejects them. Never sent.
	Refused []Rejection `json:"-"`
}

// CallKey identifies one call of one batch: <session>.<replyid>.<callid>.
func CallKey(session, replyID, callID string) string { return session + "." + replyID + "." + callID }

// RegisterAck is the data of io.toolbus.register.ack.
type RegisterAck struct {
	Accepted []string    `json:"accepted"`
	Rejected []Rejection `json:"rejected"`
}

// Rejection names a definition that was not accepted, and why.
type Rejection struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Group is a tool group definition.
type Group struct {
	Name            string `json:"name"`
	Description     string `json:"description"`
	Instructions    string `json:"instructions,omitempty"`
	Scope           string `json:"scope"`
	ActiveByDefault bool   `json:"active_by_default"`
	ActivateOnSkill string `json:"activate_on_skill,omitempty"`
	// Skills names the skills that belong to the group: they are visible
	// only while it is active (docs/protocol.md 10).
	Skills []string `json:"skills,omitempty"`
}

// Permission checks of a tool definition.
const (
	PermissionPassthrough = "passthrough"
	PermissionAllow       = "allow"
	PermissionAsk         = "ask"
)

// Rule matchers of a tool definition.
const (
	MatcherNone    = "none"
	MatcherCommand = "command"
	MatcherPath    = "path"
)

// DefaultTimeoutMS is a tool's timeout unless its definition sets one.
const DefaultTimeoutMS = 300000

// ToolDef is a tool definition. Unmarshalling fills the defaults of fields
// that are absent: concurrency_safe true, timeout_ms 300000, max_attempts 1,
// permission "passthrough", rule_matcher "none".
type ToolDef struct {
	Name string `json:"name"`
	// Title is a human-readable display name (an MCP tool's title); "" means
	// none. Models are shown Name and Description.
	Title           string          `json:"title,omitempty"`
	Description     string          `json:"description"`
	InputSchema     json.RawMessage `json:"input_schema"`
	OutputSchema    json.RawMessage `json:"output_schema,omitempty"`
	Groups          []string        `json:"groups,omitempty"`
	ReadOnly        bool            `json:"read_only"`
	ConcurrencySafe bool            `json:"concurrency_safe"`
	Idempotent      bool            `json:"idempotent"`
	External        bool            `json:"external"`
	StateInjected   bool            `json:"state_injected"`
	// Durable calls go through the P_WORK work queue instead of core
	// request/reply: a call whose worker dies is delivered to another.
	Durable bool `json:"durable,omitempty"`
	// Background: a call that reaches its timeout goes on as a background
	// task instead of ending "timeout" (docs/protocol.md 5.10).
	Background bool `json:"background,omitempty"`
	// NoBackground: a call's own "background": true ask is ignored
	// (docs/protocol.md 5.10, 7.2).
	NoBackground bool   `json:"no_background,omitempty"`
	TimeoutMS    int64  `json:"timeout_ms"`
	MaxAttempts  int    `json:"max_attempts"`
	Permission   string `json:"permission"`
	RuleMatcher  string `json:"rule_matcher"`
	RuleField    string `json:"rule_field,omitempty"`
	// PathBase is the absolute directory a rule_matcher "path" tool
	// resolves its relative path arguments against (docs/protocol.md 6.4).
	PathBase string  `json:"path_base,omitempty"`
	MCP      *MCPRef `json:"mcp,omitempty"`
	// CacheTTLMS, on a read-only or idempotent tool, lets the router answer
	// a repeated call from its result cache for this long; CacheScope is
	// "session" (the default), "user" or "global" (docs/protocol.md 7.2).
	CacheTTLMS int64  `json:"cache_ttl_ms,omitempty"`
	CacheScope string `json:"cache_scope,omitempty"`
}

// MCPRef names the MCP server tool a bridged tool stands for (docs/protocol.md
// 7.2, 12), with its annotations as the server sent them and its
// execution.taskSupport ("" when the server said nothing).
type MCPRef struct {
	Server      string          `json:"server"`
	Tool        string          `json:"tool"`
	Annotations *MCPAnnotations `json:"annotations,omitempty"`
	TaskSupport string          `json:"task_support,omitempty"`
}

// MCPAnnotations are an MCP tool's annotations, member for member
// (camelCase, as MCP spells them).
type MCPAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Defaults fills the zero fields that have a non-zero default.
func (d *ToolDef) Defaults() {
	d.TimeoutMS = cmp.Or(max(d.TimeoutMS, 0), DefaultTimeoutMS)
	d.MaxAttempts = max(d.MaxAttempts, 1)
	d.Permission = cmp.Or(d.Permission, PermissionPassthrough)
	d.RuleMatcher = cmp.Or(d.RuleMatcher, MatcherNone)
}

// UnmarshalJSON decodes a definition, with concurrency_safe true when absent.
func (d *ToolDef) UnmarshalJSON(b []byte) error {
	type plain ToolDef
	p := plain{ConcurrencySafe: true}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*d = ToolDef(p)
	d.Defaults()
	return nil
}

// Answer is the data of io.toolbus.answer: State and Output for an external
// call, Confirmed (with optional Input and Rules) for a confirmation.
type Answer struct {
	State     string          `json:"state,omitempty"`
	Output    []Block         `json:"output,omitempty"`
	Confirmed *bool           `json:"confirmed,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	Rules     []Rule          `json:"rules,omitempty"`
	// InputDigest is the parked input's digest (InputDigest) a
	// confirmation confirms or denies (docs/protocol.md 6.3).
	InputDigest string `json:"input_digest,omitempty"`
	// Reason is why a person denied a confirmation ("confirmed": false):
	// the denial's text quotes it (docs/protocol.md 6.3).
	Reason string `json:"reason,omitempty"`
}

// MaxDenyReason is the most bytes of a denial's reason.
const MaxDenyReason = 2048

// ExecRecorded is the data of io.toolbus.exec.recorded, a router's reply to
// a durable call's result: Recorded is false when the call already had one.
type ExecRecorded struct {
	Recorded bool   `json:"recorded"`
	Reason   string `json:"reason,omitempty"`
}

// AnswerAck is the data of io.toolbus.answer.ack.
type AnswerAck struct {
	Accepted bool `json:"accepted"`
}

// ParkedCall is one entry of the admin verb parked.list.
type ParkedCall struct {
	Session     string          `json:"session"`
	ReplyID     string          `json:"reply_id"`
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Input       json.RawMessage `json:"input,omitempty"`
	InputDigest string          `json:"input_digest,omitempty"`
	// InputOmitted (since 1.18): the input did not fit in the page (nor,
	// when they are absent too, the context and user); a page starting at
	// this call lists it (docs/protocol.md 9).
	InputOmitted   bool      `json:"input_omitted,omitempty"`
	Kind           string    `json:"kind"`
	Subject        string    `json:"subject"`
	SuggestedRules []Rule    `json:"suggested_rules,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	Created        time.Time `json:"created"`
	Expires        time.Time `json:"expires"`
	// Since 1.14, as in P_parked (6.1), so that an approver needs no
	// JetStream API (docs/inbox.md).
	Revision      uint64          `json:"revision,omitempty"`
	User          json.RawMessage `json:"user,omitempty"`
	Context       json.RawMessage `json:"context,omitempty"`
	RequestScoped bool            `json:"request_scoped,omitempty"`
}

// ParkedQuery is the data of the admin verb parked.list (since 1.18; {}:
// the first page).
type ParkedQuery struct {
	After string `json:"after,omitempty"` // the next of the page before
	Limit int    `json:"limit,omitempty"` // at most this many calls; 0: as many as fit
	// OmitThrough (proposed 1.30): the calls whose record revision is at
	// most this are listed without input, context and user
	// (input_omitted), as a poller that holds them asks; 0: none.
	OmitThrough uint64 `json:"omit_through,omitempty"`
}

// ParkedPage is the reply of parked.list: a page of calls, and the cursor
// of the next page when there is more (since 1.18).
type ParkedPage struct {
	Parked []ParkedCall `json:"parked"`
	Next   string       `json:"next,omitempty"`
}

// Cursor is the cursor of a page of parked.list after p:
// "<created, RFC 3339 with nanoseconds> <call key>" (docs/protocol.md 9).
func (p ParkedCall) Cursor() string {
	return p.Created.Format(time.RFC3339Nano) + " " + CallKey(p.Session, p.ReplyID, p.ID)
}

// Status is the data of the admin verb status: what one router sees.
type Status struct {
	Router   string       `json:"router"`
	Tools    []ToolStatus `json:"tools"`
	Groups   int          `json:"groups"`
	Sessions int          `json:"sessions"`
	// SessionsStored is the number of session records in KV (every
	// session of the deployment, not only those this router holds); nil
	// when the router could not read it.
	SessionsStored *int `json:"sessions_stored,omitempty"`
	Parked         int  `json:"parked"`
	// Store is what this router has seen of JetStream's space (docs/protocol.md 9).
	Store StoreStatus `json:"store"`
	// Warnings name the configuration's unknown pinned, quota and group
	// names (docs/protocol.md 9); absent when there is none.
	Warnings []string `json:"warnings,omitempty"`
}

// Live reports whether s shows tool registered and callable: external,
// or with at least one live worker.
func (s Status) Live(tool string) bool {
	for _, t := range s.Tools {
		if t.Name == tool {
			return t.External || t.LiveWorkers > 0
		}
	}
	return false
}

// CheckLive is nil when every named tool is Live, else an error naming the
// first that is not.
func (s Status) CheckLive(names ...string) error {
	for _, n := range names {
		if !s.Live(n) {
			return fmt.Errorf("tool %s not live", n)
		}
	}
	return nil
}

// StoreStatus is Status.Store: State "ok", or "full" with JetStream's
// reason (Error) and since when (Since), until a write succeeds again.
type StoreStatus struct {
	State string     `json:"state"`
	Error string     `json:"error,omitempty"`
	Since *time.Time `json:"since,omitempty"`
	// Bounds are the soft bounds of P_parked, P_sessions, P_ledger (since
	// 1.24), P_tasks and P_mcp (1.26; its refusals the facade's the router
	// serves, 1.27) and, with quotas or the result cache on, P_limits,
	// P_LIMITS and P_rcache (1.27), as this router keeps them; absent: none.
	Bounds []BoundStatus `json:"bounds,omitempty"`
}

// BoundStatus is one bucket's soft bound in StoreStatus: its bytes (read
// at most a second before, plus what the router admitted since), the
// bound, and the new keys the router refused at it since its start.
type BoundStatus struct {
	Bucket      string     `json:"bucket"` // parked, sessions, ledger, tasks, mcp, limits, budgets or cache
	Bytes       int64      `json:"bytes"`
	Bound       int64      `json:"bound"`
	Refused     uint64     `json:"refused"`
	LastRefused *time.Time `json:"last_refused,omitempty"`
	// DropsOldest: past the bound the oldest entries go and nothing is
	// refused (cache; Refused is 0).
	DropsOldest bool `json:"drops_oldest,omitempty"`
}

// StatusWorkers bounds ToolStatus.Workers: the first ids, sorted, of a
// tool's live workers, fewer where the reply would pass the server's max
// payload (their count is LiveWorkers).
const StatusWorkers = 64

// ToolStatus is one tool in Status.
type ToolStatus struct {
	Name        string   `json:"name"`
	LiveWorkers int      `json:"live_workers"`
	External    bool     `json:"external"`
	Groups      []string `json:"groups,omitempty"`
	// Workers are the ids of the first StatusWorkers live workers, sorted,
	// as many as fit the reply (protocol 1.29); nil from an older router.
	Workers []string `json:"workers,omitempty"`
}

// SkillInfo is one entry of the admin verb skills.list (docs/protocol.md 10):
// {"skills": [SkillInfo...]}.
type SkillInfo struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Source      string   `json:"source"`
	User        string   `json:"user,omitempty"`
	Groups      []string `json:"groups"`
	Digest      string   `json:"digest"`
}

// InputDigest is the digest a confirmation carries of the parked input it
// confirms (docs/protocol.md 6.3): "sha256:" and the lowercase hex SHA-256
// of the input as the parked record holds it, compacted JSON.
func InputDigest(input json.RawMessage) string {
	sum := sha256.Sum256(appendCompact(nil, input))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Replay is the data of io.toolbus.events.replay (docs/protocol.md 3.4): a
// session's agent asks a router for a consumer of its stored events.
// StartSeq, when set, is the first stream sequence wanted; zero means all.
type Replay struct {
	StartSeq uint64 `json:"start_seq,omitempty"`
}

// ReplayReady is the data of io.toolbus.events.replay.ready: the pull
// consumer the router made on Stream, filtered on the session's events,
// deleted once nobody pulled from it for Idle. Heartbeat (1.9) says the
// router honours ConsumerNext.HeartbeatMS (docs/protocol.md 3.4).
type ReplayReady struct {
	Stream    string `json:"stream"`
	Consumer  string `json:"consumer"`
	Idle      string `json:"idle"`
	Heartbeat bool   `json:"heartbeat,omitempty"`
}

// HandoffFollow is the data of io.toolbus.handoff.follow (docs/protocol.md
// 6.2): a handler or approver asks a router for a pull consumer of the
// handoff requests its subject names. StartSeq, when set, is the first
// stream sequence wanted; zero means every request the stream keeps.
type HandoffFollow struct {
	StartSeq uint64 `json:"start_seq,omitempty"`
}

// ConsumerNext is the data of io.toolbus.consumer.next (docs/protocol.md
// 3.4): pull up to Batch messages (1 to MaxConsumerBatch; zero means 64)
// from the router-made consumer named Consumer, waiting up to ExpiresMS
// milliseconds (0 to MaxConsumerWaitMS; zero means answer at once), with an
// idle heartbeat every HeartbeatMS (1.9; MinConsumerHeartbeatMS to
// ExpiresMS/2) while it waits.
type ConsumerNext struct {
	Consumer    string `json:"consumer"`
	Batch       int    `json:"batch,omitempty"`
	ExpiresMS   int64  `json:"expires_ms,omitempty"`
	HeartbeatMS int64  `json:"heartbeat_ms,omitempty"`
}

// ConsumerStop is the data of io.toolbus.consumer.stop: delete the
// router-made consumer named Consumer (no reply; the server drops an idle
// one anyway).
type ConsumerStop struct {
	Consumer string `json:"consumer"`
}

// Bounds of a relayed pull (io.toolbus.consumer.next).
// MinConsumerHeartbeatMS bounds what one pull may cost in heartbeats:
// at most MaxConsumerWaitMS/MinConsumerHeartbeatMS (60) per pull.
const (
	MaxConsumerBatch       = 256
	MaxConsumerWaitMS      = 30_000
	MinConsumerHeartbeatMS = 500
)

// NewConsumerName returns a router-made consumer's name: kind ("replay",
// "handoff"), a dash and 128 random bits in lowercase base32 (26
// characters), so that no one can guess one.
func NewConsumerName(kind string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return kind + "-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// ValidConsumerName reports whether name has the form NewConsumerName
// makes for kind.
func ValidConsumerName(kind, name string) bool {
	rest, ok := strings.CutPrefix(name, kind+"-")
	if !ok || len(rest) != 26 {
		return false
	}
	for _, c := range rest {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}
