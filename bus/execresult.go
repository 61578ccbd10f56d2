package bus

import (
	"encoding/json"
	"strings"
)

// ExecResultData reads the event's data, an io.toolbus.exec.result's, into
// xr, as DataAs does. The plain form toolbus's workers write — a state, an
// output of blocks with a type and a text, metadata and a state patch as
// objects, every string plain ASCII without escapes — is read by a small
// scanner: the output one allocation, its strings one more. Anything else
// goes to DataAs (FuzzExecResultFlat holds the scanner to it).
func (e *Event) ExecResultData(xr *ExecResult) error {
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
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	var state []byte
	var blocksBuf [4]flatBlock
	blocks := blocksBuf[:0]
	var meta, patch json.RawMessage
	var seen uint8
	for first := true; ; first = false {
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false
		}
		if b[i] == '}' {
			if first {
				return false
			}
			break
		}
		if !first {
			if b[i] != ',' {
				return false
			}
			i = skipSpace(b, i+1)
		}
		key, next, ok := flatString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		var bit uint8
		switch string(key) {
		case "state":
			bit = 1
			state, next, ok = flatString(b, i)
		case "output":
			bit = 2
			blocks, next, ok = flatBlocks(b, i, blocks)
		case "metadata", "state_patch":
			bit = 4
			if key[0] == 's' {
				bit = 8
			}
			next, ok = flatValue(b, i)
			if ok && bit == 4 {
				meta = append(json.RawMessage(nil), b[i:next]...)
			} else if ok {
				patch = append(json.RawMessage(nil), b[i:next]...)
			}
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		i = next - 1
	}
	if skipSpace(b, i+1) != len(b) || seen&3 != 3 {
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

// flatBlocks reads the array of blocks at b[i] onto blocks (emptied
// first): objects with a "type" and, optionally, a "text", both plain
// strings. next is the index after the array.
func flatBlocks(b []byte, i int, blocks []flatBlock) (_ []flatBlock, next int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	blocks = blocks[:0]
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return blocks, i + 1, true
	}
	for {
		var bl flatBlock
		if bl, i, ok = flatTextBlock(b, i); !ok {
			return nil, 0, false
		}
		blocks = append(blocks, bl)
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ']':
			return blocks, i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return nil, 0, false
		}
	}
}

// flatTextBlock reads the block object at b[i]; next is the index after it.
func flatTextBlock(b []byte, i int) (bl flatBlock, next int, ok bool) {
	if i >= len(b) || b[i] != '{' {
		return bl, 0, false
	}
	var seen uint8
	for first := true; ; first = false {
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return bl, 0, false
		}
		if b[i] == '}' {
			if first || seen&1 == 0 {
				return bl, 0, false
			}
			return bl, i + 1, true
		}
		if !first {
			if b[i] != ',' {
				return bl, 0, false
			}
			i = skipSpace(b, i+1)
		}
		key, next, ok := flatString(b, i)
		if !ok {
			return bl, 0, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return bl, 0, false
		}
		i = skipSpace(b, i+1)
		var v []byte
		if v, next, ok = flatString(b, i); !ok {
			return bl, 0, false
		}
		switch {
		case string(key) == "type" && seen&1 == 0:
			bl.typ, seen = v, seen|1
		case string(key) == "text" && seen&2 == 0:
			bl.text, seen = v, seen|2
		default:
			return bl, 0, false
		}
		i = next - 1
	}
}
