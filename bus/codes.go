package bus

import (
	"fmt"
)

// CloudEvent types of protocol version 1.
const (
	TypeCallBatch     = "io.toolbus.call.batch"
	TypeCallReply     = "io.toolbus.call.reply"
	TypeToolsQuery    = "io.toolbus.tools.query"
	TypeToolsList     = "io.toolbus.tools.list"
	TypeCallCancel    = "io.toolbus.call.cancel"
	TypeCallResult    = "io.toolbus.call.result"
	TypeCallProgress  = "io.toolbus.call.progress"
	TypeCallParked    = "io.toolbus.call.parked"
	TypeCallRunning   = "io.toolbus.call.running" // a batch still running (docs/protocol.md 3.2.1, 1.25)
	TypeBatchDone     = "io.toolbus.batch.done"
	TypeExec          = "io.toolbus.exec"
	TypeExecResult    = "io.toolbus.exec.result"
	TypeExecRecorded  = "io.toolbus.exec.recorded"
	TypeExternalReq   = "io.toolbus.external.request"
	TypeConfirmReq    = "io.toolbus.confirm.request"
	TypeAnswer        = "io.toolbus.answer"
	TypeAnswerAck     = "io.toolbus.answer.ack"
	TypeRegister      = "io.toolbus.register"
	TypeRegisterAck   = "io.toolbus.register.ack"
	TypeAdmin         = "io.toolbus.admin"
	TypeAdminReply    = "io.toolbus.admin.reply"
	TypeError         = "io.toolbus.error"
	TypeReplay        = "io.toolbus.events.replay"
	TypeReplayReady   = "io.toolbus.events.replay.ready"
	TypeHandoffFollow = "io.toolbus.handoff.follow"
	TypeHandoffReady  = "io.toolbus.handoff.ready"
	TypeConsumerNext  = "io.toolbus.consumer.next"
	TypeConsumerStop  = "io.toolbus.consumer.stop"
	SpecVersion       = "1.0"
	ContentTypeEvent  = "application/cloudevents+json"
	ContentTypeJSON   = "application/json"
	HeaderContentType = "content-type"
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	// HeaderRequestInfo is nats-server's (ClientInfoHdr): set by the server,
	// with the sender's account ("acc"), on a message crossing a service import.
	HeaderRequestInfo = "Nats-Request-Info"
)

// Error codes, as carried in io.toolbus.error data and in result.error.code.
const (
	CodeBadEvent        = "bad_event"
	CodeBadRequest      = "bad_request"
	CodeUnknownTool     = "unknown_tool"
	CodeInactiveTool    = "inactive_tool"
	CodeInvalidInput    = "invalid_input"
	CodeDenied          = "denied"
	CodeUnavailable     = "unavailable"
	CodeTimeout         = "timeout"
	CodeToolError       = "tool_error"
	CodeUnknownOutcome  = "unknown_outcome"
	CodeInterrupted     = "interrupted"
	CodeNotParked       = "not_parked"
	CodeAlreadyAnswered = "already_answered"
	CodeInternal        = "internal"
	CodeLimitExceeded   = "limit_exceeded"
	// CodeBusy is a router's io.toolbus.error reply to a batch or query it
	// cannot take now (docs/protocol.md 1): nothing ran, and the same event may
	// be sent again after a short backoff.
	CodeBusy = "busy"
)

// BusyText is the message of a busy reply.
const BusyText = "the router is at capacity and took nothing from this message; send it again after a short backoff"

// ErrBusy is the sentinel of CodeBusy, for errors.Is.
var ErrBusy = &Error{Code: CodeBusy}

// Result states.
const (
	StateSuccess     = "success"
	StateError       = "error"
	StateInterrupted = "interrupted"
	StateDenied      = "denied"
)

// Parked kinds.
const (
	KindExternal = "external"
	KindConfirm  = "confirm"
	KindQueued   = "queued"
)

// Merge modes of a request-scoped tool configuration.
const (
	MergeExternalPriority = "merge_external_priority"
	MergeExternalOnly     = "external_only"
	MergeAgentOnly        = "agent_only"
)

// Listing formats of io.toolbus.tools.query.
const (
	FormatToolbus         = "toolbus"
	FormatOpenAI          = "openai"
	FormatOpenAIResponses = "openai-responses"
	FormatAnthropic       = "anthropic"
	FormatGemini          = "gemini"
	FormatMCP             = "mcp"
)

// Group scopes.
const (
	GroupBasic    = "basic"
	ScopeMeta     = "meta"
	ScopeExternal = "external"
	ScopeBasic    = "basic"
)

// Limits of protocol version 1.
const (
	MaxCalls = 64
	// MaxCancelCalls is the most call ids one cancel may name (3.5), and the
	// ceiling of a router's --max-calls: no honest cancel names more. A
	// cancel naming more is bad input: routers answer io.toolbus.error,
	// workers drop it, and nothing is cancelled.
	MaxCancelCalls = 1024
)

// InterruptedText is the fixed text of a call ended by io.toolbus.call.cancel.
const InterruptedText = "<system-reminder>The tool call has been interrupted by the user.</system-reminder>"

// Error is the data of an io.toolbus.error event and the Go error that stands
// for it. Two Errors match with errors.Is when their codes are equal, so
// callers test against the sentinels below:
//
//	if errors.Is(err, bus.ErrNotParked) { ... }
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is; their messages are empty.
var (
	ErrBadEvent        = &Error{Code: CodeBadEvent}
	ErrBadRequest      = &Error{Code: CodeBadRequest}
	ErrUnknownTool     = &Error{Code: CodeUnknownTool}
	ErrInactiveTool    = &Error{Code: CodeInactiveTool}
	ErrInvalidInput    = &Error{Code: CodeInvalidInput}
	ErrDenied          = &Error{Code: CodeDenied}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrTimeout         = &Error{Code: CodeTimeout}
	ErrToolError       = &Error{Code: CodeToolError}
	ErrUnknownOutcome  = &Error{Code: CodeUnknownOutcome}
	ErrInterrupted     = &Error{Code: CodeInterrupted}
	ErrNotParked       = &Error{Code: CodeNotParked}
	ErrAlreadyAnswered = &Error{Code: CodeAlreadyAnswered}
	ErrInternal        = &Error{Code: CodeInternal}
)
