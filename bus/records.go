package bus

import (
	"encoding/json"
	"fmt"
	"time"
)

// This file holds the records more than one package reads or writes, so
// that each has one encoder and one decoder (docs/router.md "Layout").

// WorkerBeat is a P_workers value (docs/protocol.md 8): a worker's
// liveness for one tool, keyed <tool>.<worker>. The registry writes it;
// the registry and the MCP facade's watch read it.
type WorkerBeat struct {
	// Left says the worker is leaving; the value then expires with the
	// bucket's TTL like any beat.
	Left bool `json:"left,omitempty"`
	// InFlight is absent for a worker that does not report its calls in
	// flight, and a list (CallKey), possibly empty, for one that does.
	InFlight []string `json:"inflight,omitempty"`
	// Binary says the worker takes exec requests in binary mode
	// (docs/protocol.md 5.1).
	Binary bool `json:"binary,omitempty"`
}

// WorkerLeft is the P_workers value of a worker that left.
var WorkerLeft = []byte(`{"left":true}`)

// Encode returns the beat's P_workers value: inflight present (possibly
// empty) only for a worker that reports its calls, binary only when true.
func (v WorkerBeat) Encode() []byte {
	if v.Left {
		return WorkerLeft
	}
	b := []byte{'{'}
	if v.InFlight != nil {
		in, _ := json.Marshal(v.InFlight)
		b = append(append(b, `"inflight":`...), in...)
	}
	if v.Binary {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"binary":true`...)
	}
	return append(b, '}')
}

// DecodeWorkerBeat reads a P_workers value; a value that is not a beat
// reads as a live worker that says nothing more.
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
