package bus

import (
	"encoding/json"
	"strings"
)

// FromEvent reads the event's data, an io.toolbus.exec.result's, into
// xr, as DataAs does. The plain form toolbus's workers write — a state, an
// output of blocks with a type and a text, metadata and a state patch as
// objects, every string plain ASCII without escapes — is read by a small
// scanner: the output one allocation, its strings one more. Anything else
// goes to DataAs (FuzzExecResultFlat holds the scanner to it).
func (xr *ExecResult) FromEvent(e *Event) error {
	if decodeExecResultFlat(e.Data, xr) {
		return nil
	}
	general := new(ExecResult) // not xr: the caller's stays on its stack
	err := e.DataAs(general)
	*xr = *general
	return err
}

// flatBlock is a block of the plain form: its type and text, in the data.
type flatBlock struct{ typ, text []byte }

// The states and block types written as constants (no string of their own).
var (
	execStates = []string{StateSuccess, StateError, StateInterrupted}
	blockTypes = []string{BlockText}
)

// decodeExecResultFlat reads b into xr when b is in the plain form, and
// reports whether it was; xr is then set in full.
func decodeExecResultFlat(b []byte, xr *ExecResult) bool {
	var state []byte
	var blocksBuf [4]flatBlock
	blocks := blocksBuf[:0]
	var meta, patch json.RawMessage
	seen, end, ok := flatMembers(b, skipSpace(b, 0), func(key []byte, i int) (uint8, int, bool) {
		switch string(key) {
		case "state":
			v, next, ok := flatString(b, i)
			state = v
			return 1, next, ok
		case "output":
			next, ok := flatArray(b, i, func(i int) (int, bool) {
				bl, next, ok := flatTextBlock(b, i)
				blocks = append(blocks, bl)
				return next, ok
			})
			return 2, next, ok
		case "metadata":
			next, ok := flatValue(b, i)
			if ok {
				meta = append(json.RawMessage(nil), b[i:next]...)
			}
			return 4, next, ok
		case "state_patch":
			next, ok := flatValue(b, i)
			if ok {
				patch = append(json.RawMessage(nil), b[i:next]...)
			}
			return 8, next, ok
		}
		return 0, 0, false
	})
	if !ok || skipSpace(b, end) != len(b) || seen&3 != 3 {
		return false
	}
	// Every string that is not a constant, as slices of one new string.
	n := len(state)
	for _, bl := range blocks {
		n += len(bl.typ) + len(bl.text)
	}
	var all strings.Builder
	all.Grow(n)
	take := func(v []byte, consts []string) string {
		if c, ok := knownValue(v, consts); ok {
			return c
		}
		off := all.Len()
		all.Write(v)
		return all.String()[off:]
	}
	*xr = ExecResult{State: take(state, execStates), Output: make([]Block, len(blocks)), Metadata: meta, StatePatch: patch}
	for k, bl := range blocks {
		xr.Output[k] = Block{Type: take(bl.typ, blockTypes), Text: take(bl.text, nil)}
	}
	return true
}

// flatTextBlock reads the block object at b[i]: a "type" and, optionally,
// a "text", both plain strings. next is the index after it.
func flatTextBlock(b []byte, i int) (bl flatBlock, next int, ok bool) {
	seen, next, ok := flatMembers(b, i, func(key []byte, i int) (uint8, int, bool) {
		v, next, ok := flatString(b, i)
		switch string(key) {
		case "type":
			bl.typ = v
			return 1, next, ok
		case "text":
			bl.text = v
			return 2, next, ok
		}
		return 0, 0, false
	})
	return bl, next, ok && seen&1 != 0
}
