package bus

import (
	"encoding/json"
	"strings"
)

// FromEvent reads an io.toolbus.exec.result's data into xr as DataAs does;
// the plain form the workers write by a small scanner (FuzzExecResultFlat).
func (xr *ExecResult) FromEvent(e *Event) error {
	if decodeExecResultFlat(e.Data, xr) {
		return nil
	}
	return dataAs(e, xr)
}

// flatBlock is a block of the plain form: its type and text, in the data.
type flatBlock struct{ typ, text []byte }

// The states and block types written as constants (no string of their own).
var (
	execStates = []string{StateSuccess, StateError, StateInterrupted}
	blockTypes = []string{BlockText}
)

// decodeExecResultFlat reads b into xr and reports whether it was in the plain form.
func decodeExecResultFlat(b []byte, xr *ExecResult) bool {
	var state, cancel []byte
	var blocksBuf [4]flatBlock
	blocks := blocksBuf[:0]
	var meta, patch json.RawMessage
	p := flatParser{b: b}
	seen, ok := p.object(func(key []byte) uint16 {
		var ok bool
		switch string(key) {
		case "state":
			state, ok = p.plain()
			return 1 * b2u(ok)
		case "output":
			return 2 * b2u(p.array(func() bool {
				bl, ok := flatTextBlock(&p)
				blocks = append(blocks, bl)
				return ok
			}))
		case "metadata":
			v, ok := p.raw("{[")
			meta = append(json.RawMessage(nil), v...)
			return 4 * b2u(ok)
		case "state_patch":
			v, ok := p.raw("{[")
			patch = append(json.RawMessage(nil), v...)
			return 8 * b2u(ok)
		case "cancel":
			cancel, ok = p.plain()
			return 16 * b2u(ok)
		}
		return 0
	})
	if !ok || !p.end() || seen&3 != 3 {
		return false
	}
	// Every string that is not a constant, as slices of one new string.
	n := len(state) + len(cancel)
	for _, bl := range blocks {
		n += len(bl.typ) + len(bl.text)
	}
	var all strings.Builder
	all.Grow(n)
	*xr = ExecResult{State: addKnown(&all, state, execStates), Output: make([]Block, len(blocks)), Metadata: meta, StatePatch: patch}
	if len(cancel) > 0 {
		xr.Cancel = addString(&all, cancel)
	}
	for k, bl := range blocks {
		xr.Output[k] = Block{Type: addKnown(&all, bl.typ, blockTypes), Text: addString(&all, bl.text)}
	}
	return true
}

// flatTextBlock reads the block object at p: "type" and optionally "text".
func flatTextBlock(p *flatParser) (bl flatBlock, ok bool) {
	seen, ok := p.object(func(key []byte) uint16 {
		v, ok := p.plain()
		switch string(key) {
		case "type":
			bl.typ = v
			return 1 * b2u(ok)
		case "text":
			bl.text = v
			return 2 * b2u(ok)
		}
		return 0
	})
	return bl, ok && seen&1 != 0
}
