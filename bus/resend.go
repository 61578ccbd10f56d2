package bus

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// SameCalls checks that copy, the calls of a batch re-sent under a reply id,
// are the calls of first, the batch the router holds for that reply id
// (docs/protocol.md 3.1, 1.12): the same calls in the same order, each with
// the same id, name and input. Inputs are compared as the JSON they hold (a
// string input as the object it holds, an absent one as {}), members in any
// order, so that a copy encoded again compares equal. It returns nil, or the
// bad_request that refuses the copy, naming the first call that differs.
// Nothing else of the batch is compared.
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
// JSON (CanonicalInput).
func SameInput(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	return bytes.Equal(CanonicalInput(a), CanonicalInput(b))
}

// CanonicalInput is a call's input as sent, in one form: a string input as
// the JSON it holds, absent (or empty) as {}, then decoded and encoded
// again (members sorted, numbers as written, no HTML escaping). Input that
// is not JSON is returned as it is.
func CanonicalInput(in json.RawMessage) []byte {
	raw := bytes.TrimSpace(in)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			raw = bytes.TrimSpace([]byte(s))
		}
	}
	if len(raw) == 0 {
		return []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return raw
	}
	var out bytes.Buffer
	e := json.NewEncoder(&out)
	e.SetEscapeHTML(false)
	if e.Encode(v) != nil {
		return raw
	}
	return bytes.TrimRight(out.Bytes(), "\n")
}

// CallDigest is the digest of a call's tool name and input that the dedupe
// ledger keeps with the call's claim (docs/protocol.md 3.1, 1.12), so that a
// re-sent copy of the call with another tool or input is told apart from
// the call and never gets its result: 22 characters, the first 16 bytes of
// the SHA-256 of the name, a zero byte and the input compacted. The input is
// the router's (a string input as the object it holds); two inputs that
// differ only in the order of their members have different digests.
func CallDigest(name string, input json.RawMessage) string {
	var buf [512]byte
	b := append(append(buf[:0], name...), 0)
	b = appendCompact(b, input)
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// OtherCallResult is the result of a call whose key (session, reply id,
// call id) the ledger holds for a call of another tool or input (CallDigest):
// it did not run, and it gets no result of that call.
func OtherCallResult(c Call) Result {
	return ErrorResult(c, CodeBadRequest, fmt.Sprintf(
		"BadRequestError: call %s was sent before under this reply id with another tool or input; a re-sent batch must hold the same calls. It did not run here and gets no result of that call: send other calls under a new reply id.", c.ID))
}
