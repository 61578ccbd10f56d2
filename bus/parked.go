package bus

import (
	"encoding/json"
	"time"
)

// ParkStatus is where a parked call record stands (docs/protocol.md 6.1).
// Only package parked writes the record; the inbox and the operator CLI
// read it through this type.
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
	// InputDigest is InputDigest(Call.Input): a confirmation must name it
	// (docs/protocol.md 6.3), so the approver confirms exactly the input
	// it saw.
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
	// Batch is the batch's continuation when this call is the batch's
	// only wait and nothing of it is left to run (docs/protocol.md 6.1,
	// 1.6): package parked's, opaque to readers.
	Batch json.RawMessage `json:"batch,omitempty"`
	// AnsweredBy and AnsweredAt say who answered (the answer's
	// CloudEvents source, a claim; "<source> via P.approve" when it came
	// on the approver's subject) and when (docs/protocol.md 6.1).
	AnsweredBy string    `json:"answered_by,omitempty"`
	AnsweredAt time.Time `json:"answered_at,omitzero"`
	// Owner and Touched are the lease of an answered call: the router
	// that took the answer runs the confirmed call and renews Touched
	// meanwhile; once it is stale another router takes the answer over.
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
// subscribers of its subject and is not stored: the stream that captures
// the subject refuses a message that expects another stream
// (docs/protocol.md 3.4, call.parked).
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
