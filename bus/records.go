package bus

import (
	"encoding/json"
	"fmt"
	"time"
)

// The records more than one package reads or writes: one encoder and one
// decoder each (docs/router.md "Layout").

// WorkerBeat is a P_workers value (docs/protocol.md 8): a worker's liveness
// for one tool, keyed <tool>.<worker>, written by the registry.
type WorkerBeat struct {
	// Left says the worker is leaving; the value then expires with the
	// bucket's TTL like any beat.
	Left bool `json:"left,omitempty"`
	// InFlight is absent (nil) for a worker that does not report its calls
	// in flight, and a list (CallKey), possibly empty, for one that does.
	InFlight []string `json:"inflight,omitzero"`
	// Binary and Compact are the exec forms the worker takes (5.1).
	Binary  bool `json:"binary,omitempty"`
	Compact bool `json:"compact,omitempty"`
}

// Form is the most capable exec form the beat's worker reads.
func (v WorkerBeat) Form() ExecForm {
	switch {
	case v.Binary && v.Compact:
		return ExecCompact
	case v.Binary:
		return ExecBinary
	}
	return ExecStructured
}

// WorkerLeft is the P_workers value of a worker that left.
var WorkerLeft = []byte(`{"left":true}`)

// Encode returns the beat's P_workers value: inflight present (possibly
// empty) only for a worker that reports its calls.
func (v WorkerBeat) Encode() []byte {
	if v.Left {
		return WorkerLeft
	}
	b, _ := json.Marshal(v)
	return b
}

// DecodeWorkerBeat reads a P_workers value (one that is not a beat: live).
func DecodeWorkerBeat(b []byte) WorkerBeat {
	var v WorkerBeat
	_ = json.Unmarshal(b, &v)
	return v
}

// The results that more than one package gives, with the same texts
// (docs/protocol.md 3.3).

// TimeoutResult is the result of a call that ran past its timeout d.
func TimeoutResult(c Call, d time.Duration) Result {
	return ErrorResult(c, CodeTimeout, "Tool execution timeout after "+d.String())
}

// InterruptedResult is the result of a call that a cancel or a shutdown
// ended.
func InterruptedResult(c Call) Result {
	return ErrorResult(c, CodeInterrupted, InterruptedText)
}

// InternalResult is the result of a call that failed for err, an
// infrastructure fault.
func InternalResult(c Call, err error) Result {
	return ErrorResult(c, CodeInternal, fmt.Sprintf("InternalError: %v", err))
}

// UnknownOutcomeResult is the result of a call whose run did not report
// back.
func UnknownOutcomeResult(c Call) Result {
	return ErrorResult(c, CodeUnknownOutcome, fmt.Sprintf(
		"UnknownOutcomeError: The earlier run of tool '%s' for this call did not report back; it may or may not have taken effect.", c.Name))
}

// NotRecordedResult is the result of a call that did not run because its
// claim could not be written: safe to call again.
func NotRecordedResult(c Call) Result {
	return ErrorResult(c, CodeUnavailable, fmt.Sprintf(
		"UnavailableError: The tool '%s' did not run: its run could not be recorded, so it is safe to call again.", c.Name))
}

// NoWorkerResult is the result of a call of a tool no live worker serves.
func NoWorkerResult(c Call) Result {
	return ErrorResult(c, CodeUnavailable, fmt.Sprintf("ToolUnavailableError: No live worker serves the tool '%s' right now.", c.Name))
}

// ParkStatus is where a parked call record stands (docs/protocol.md 6.1);
// only package parked writes the record.
type ParkStatus string

// Statuses of a parked record.
const (
	ParkParked    ParkStatus = "parked"    // waiting for an answer
	ParkAnswered  ParkStatus = "answered"  // a confirmation won; the confirmed call is running
	ParkDone      ParkStatus = "done"      // the result is recorded
	ParkExpired   ParkStatus = "expired"   // nobody answered in time
	ParkCancelled ParkStatus = "cancelled" // the agent cancelled the call
)

// ParkRecord is a parked call, P_parked/<session>.<replyid>.<callid>
// (docs/protocol.md 6.1).
type ParkRecord struct {
	Session string `json:"session"`
	ReplyID string `json:"reply_id"`
	Call    Call   `json:"call"`
	// InputDigest is InputDigest(Call.Input), which a confirmation must
	// name (docs/protocol.md 6.3): the approver confirms the input it saw.
	InputDigest    string          `json:"input_digest,omitempty"`
	Kind           string          `json:"kind"`
	Subject        string          `json:"subject"`
	User           json.RawMessage `json:"user,omitempty"`
	Context        json.RawMessage `json:"context,omitempty"`
	SuggestedRules []Rule          `json:"suggested_rules,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	RequestScoped  bool            `json:"request_scoped,omitempty"`
	Status         ParkStatus      `json:"status"`
	Answer         *Answer         `json:"answer,omitempty"`
	Result         *Result         `json:"result,omitempty"`
	// Batch is the continuation when this call is the batch's only wait
	// (docs/protocol.md 6.1, 1.6), opaque to all but package parked.
	Batch json.RawMessage `json:"batch,omitempty"`
	// AnsweredBy and AnsweredAt say who answered (the answer's source, a
	// claim) and when (docs/protocol.md 6.1).
	AnsweredBy string    `json:"answered_by,omitempty"`
	AnsweredAt time.Time `json:"answered_at,omitzero"`
	// Owner and Touched are an answered call's lease, renewed while it runs.
	Owner   string    `json:"owner,omitempty"`
	Touched time.Time `json:"touched,omitzero"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`

	// Rev is the KV revision this copy was read or written at; not stored.
	Rev uint64 `json:"-"`
}

// Key returns the record's KV key, CallKey(Session, ReplyID, Call.ID).
func (r *ParkRecord) Key() string { return CallKey(r.Session, r.ReplyID, r.Call.ID) }

// An event published with HeaderLiveOnly set to LiveOnly reaches live
// subscribers only: the capturing stream refuses a message expecting another
// stream (docs/protocol.md 3.4).
const (
	HeaderLiveOnly = "Nats-Expected-Stream"
	LiveOnly       = "toolbus-live-only"
)

// HandoffRequest is the data of io.toolbus.external.request and
// io.toolbus.confirm.request (docs/protocol.md 6.2).
type HandoffRequest struct {
	Call           Call            `json:"call"`
	InputDigest    string          `json:"input_digest,omitempty"`
	User           json.RawMessage `json:"user"`
	Context        json.RawMessage `json:"context"`
	SuggestedRules []Rule          `json:"suggested_rules,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	Subject        string          `json:"subject"`
	Expires        time.Time       `json:"expires"`
}

// Question is a bridged MCP server's question as the input of a parked call
// of mcp__<server>__elicit (docs/mcp.md "Bridge mapping").
type Question struct {
	// Server is the bridged server's name (the middle of its tools' names).
	Server string `json:"server"`
	// User is the asking call's batch user: a facade asks only that
	// user's host.
	User json.RawMessage `json:"user,omitempty"`
	// Mode is "form" or "url"; Message what the server asks.
	Mode    string `json:"mode"`
	Message string `json:"message"`
	// RequestedSchema is the form's schema; URL and ElicitationID are URL
	// mode's.
	RequestedSchema json.RawMessage `json:"requested_schema,omitempty"`
	URL             string          `json:"url,omitempty"`
	ElicitationID   string          `json:"elicitation_id,omitempty"`
	// Calls are the ids of the bus calls running on the server when it asked.
	Calls []string `json:"calls"`
	// Refused says why the previous answer was not taken; it is asked again.
	Refused string `json:"refused,omitempty"`
}
