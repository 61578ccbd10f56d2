package soak

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// soakKind is one kind of call the soak's agents make. Adding a kind is
// one entry in soakKinds.
type soakKind struct {
	name   string
	tool   string
	weight int // share of the calls
	// input returns a call's input and the text its successful result must
	// have (callID is the call's id).
	input func(r *rand.Rand, callID string) (input json.RawMessage, want string)
	// once: the call is not read-only, so the ledger (or its parked
	// record) must give the agent one result however often it re-sends;
	// two different results are a duplicate.
	once bool
	// effect: each execution appends a line to the effects file
	// (toolworker's record_effect tools), so executions are counted.
	effect bool
	// durable: the tool is durable (protocol.md 5.8): unknown_outcome is a
	// wrong result, and an effect line marked repeat is a redelivered run,
	// not a second effect.
	durable bool
	// park is "" or the kind of park the call goes through first
	// (external, confirm); the soak's approver answers it.
	park string
	// answer is the approver's answer to an external call.
	answer func(callID string) []byte
}

// soakKinds are the calls of a soak.
var soakKinds = []soakKind{
	{name: "side_effect", tool: "record_effect", weight: 4, once: true, effect: true,
		input: func(_ *rand.Rand, id string) (json.RawMessage, string) {
			return json.RawMessage(`{"tag":"soak"}`), "recorded " + id
		}},
	{name: "slow_effect", tool: "record_effect", weight: 2, once: true, effect: true,
		input: func(r *rand.Rand, id string) (json.RawMessage, string) {
			return mustJSON(map[string]any{"tag": "slow", "before_ms": r.IntN(800), "after_ms": r.IntN(800)}), "recorded " + id
		}},
	// A durable call runs through the work queue: a killed worker's call is
	// delivered to another, so it never ends unknown_outcome; the tool is
	// idempotent by call key, so a redelivery after the effect only answers.
	{name: "durable", tool: "record_effect_durable", weight: 2, once: true, effect: true, durable: true,
		input: func(r *rand.Rand, id string) (json.RawMessage, string) {
			return mustJSON(map[string]any{"tag": "durable", "before_ms": r.IntN(800), "after_ms": r.IntN(800)}), "recorded " + id
		}},
	{name: "read_only", tool: "word_count", weight: 3,
		input: func(r *rand.Rand, _ string) (json.RawMessage, string) {
			n := r.IntN(20)
			return mustJSON(map[string]string{"text": strings.Repeat("word ", n)}), fmt.Sprintf(`{"words":%d}`, n)
		}},
	{name: "slow_read", tool: "slow_echo", weight: 1,
		input: func(r *rand.Rand, id string) (json.RawMessage, string) {
			return mustJSON(map[string]any{"text": "echo " + id, "ms": 100 + r.IntN(1400)}), "echo " + id
		}},
	{name: "parked_external", tool: soakExternalTool, weight: 1, once: true, park: "external",
		input: func(_ *rand.Rand, id string) (json.RawMessage, string) {
			return json.RawMessage(`{}`), "approved " + id
		},
		answer: func(id string) []byte {
			return mustJSON(map[string]any{"state": "success", "output": []map[string]string{{"type": "text", "text": "approved " + id}}})
		}},
	{name: "parked_confirm", tool: "record_effect_confirm", weight: 1, once: true, effect: true, park: "confirm",
		input: func(_ *rand.Rand, id string) (json.RawMessage, string) {
			return json.RawMessage(`{"tag":"confirmed"}`), "recorded " + id
		}},
}

// soakExternalTool is the external tool the soak registers itself and
// answers as its external handler.
const soakExternalTool = "soak_approve"

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with maps of strings and numbers
	}
	return b
}

// pickKind chooses a kind by weight.
func pickKind(r *rand.Rand) *soakKind {
	total := 0
	for i := range soakKinds {
		total += soakKinds[i].weight
	}
	n := r.IntN(total)
	for i := range soakKinds {
		if n -= soakKinds[i].weight; n < 0 {
			return &soakKinds[i]
		}
	}
	return &soakKinds[0]
}
