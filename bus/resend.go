package bus

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// SameCalls checks that copy, the calls of a batch re-sent under a reply id,
// are those of first (docs/protocol.md 3.1, 1.12): the same order, ids,
// names and inputs by JSON value (SameInput). It returns nil or the
// bad_request that refuses the copy, naming the first call that differs.
func SameCalls(replyID string, first, copy []Call) error {
	for i := range max(len(first), len(copy)) {
		if i >= len(copy) {
			return otherCalls(replyID, "call %s (%s), call %d of that batch, is missing here", first[i].ID, first[i].Name, i+1)
		}
		c := copy[i]
		if i >= len(first) || first[i].ID != c.ID {
			for j, f := range first {
				if f.ID == c.ID {
					return otherCalls(replyID, "call %s is call %d here and call %d in that batch", c.ID, i+1, j+1)
				}
			}
			return otherCalls(replyID, "call %s (%s) is not in that batch", c.ID, c.Name)
		}
		if first[i].Name != c.Name {
			return otherCalls(replyID, "call %s names tool %s here and %s in that batch", c.ID, c.Name, first[i].Name)
		}
		if !SameInput(first[i].Input, c.Input) {
			return otherCalls(replyID, "call %s (%s) has another input here than in that batch", c.ID, c.Name)
		}
	}
	return nil
}

func otherCalls(replyID, format string, args ...any) error {
	return Errorf(CodeBadRequest, "reply id %s was sent before with other calls: %s; a re-sent batch must hold the same calls (ids, names and inputs, in order), and other calls need a new reply id",
		replyID, fmt.Sprintf(format, args...))
}

// SameInput reports whether two inputs of a call, as sent, hold the same
// JSON value: their canonical forms (CanonicalInput) are equal.
func SameInput(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	return bytes.Equal(CanonicalInput(a), CanonicalInput(b))
}

// CanonicalInput is a call's input in one form (1.13): a string input as
// the JSON it holds, absent as {}, then canonical JSON (canonical.go), so two
// inputs hold the same value exactly when their forms are equal. Input that
// is not JSON is returned as it is.
func CanonicalInput(in json.RawMessage) []byte {
	c := getCanonicaliser()
	out := appendCanonicalInput(c, nil, in)
	putCanonicaliser(c, c.buf)
	return out
}

func appendCanonicalInput(c *canonicaliser, b []byte, in json.RawMessage) []byte {
	raw := bytes.TrimSpace(in)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			raw = bytes.TrimSpace([]byte(s))
		}
	}
	if len(raw) == 0 {
		return append(b, "{}"...)
	}
	return c.canonical(b, raw)
}

// CallDigests are the digests of a call's tool name and input that the
// dedupe ledger keeps with the call's claim (docs/protocol.md 3.1), so a
// re-sent copy with another tool or input never gets the call's result:
// each 22 characters of the SHA-256 of the name, a zero byte and the input,
// canon of CanonicalInput (1.13, `canon`), compact of the input compacted
// (1.12, kept in the ledger's `call` member for 1.12 routers); both in one
// string's memory.
func CallDigests(name string, input json.RawMessage) (compact, canon string) {
	sums := [2][32]byte{compactSum(name, input), canonSum(name, input)}
	const n = 22 // base64url of 16 bytes, unpadded
	var out [2 * n]byte
	base64.RawURLEncoding.Encode(out[:n], sums[0][:16])
	base64.RawURLEncoding.Encode(out[n:], sums[1][:16])
	both := string(out[:])
	return both[:n], both[n:]
}

func canonSum(name string, input json.RawMessage) [32]byte {
	c := getCanonicaliser()
	b := appendCanonicalInput(c, append(append(c.buf[:0], name...), 0), input)
	sum := sha256.Sum256(b)
	putCanonicaliser(c, b)
	return sum
}

func compactSum(name string, input json.RawMessage) [32]byte {
	var buf [512]byte
	return sha256.Sum256(appendCompact(append(append(buf[:0], name...), 0), input))
}

// OtherCallResult is the result of a call whose key (session, reply id,
// call id) the ledger holds for a call of another tool or input (CallDigests):
// it did not run, and it gets no result of that call.
func OtherCallResult(c Call) Result {
	return ErrorResult(c, CodeBadRequest, fmt.Sprintf(
		"BadRequestError: call %s was sent before under this reply id with another tool or input; a re-sent batch must hold the same calls. It did not run here and gets no result of that call: send other calls under a new reply id.", c.ID))
}
