package schemas

import "fmt"

// Limits of protocol version 1 section 13: they keep the cost of compiling
// a schema and of validating one input in proportion to their sizes.
const (
	// MaxSchemaDepth bounds the nesting of a schema document: objects and
	// arrays, counted in JSON (a "properties" level is two: the properties
	// object and the property's schema), the top-level object being 1.
	MaxSchemaDepth = 64
	// MaxInputDepth bounds the nesting of a call's input the same way (the
	// input object itself is 1).
	MaxInputDepth = 128
	// MaxSubschemas bounds the subschemas of one schema (objects and
	// booleans in schema positions, the schema itself included): the
	// compiler's cost grows with their square (about 150 ms at the limit).
	MaxSubschemas = 1000
	// MaxChecksPerValue bounds the subschemas one input value may be
	// checked against, at any depth up to MaxInputDepth, as the cost model
	// of cost.go estimates it: references can multiply them without bound.
	MaxChecksPerValue = 250
	// The estimated cost of validating one input (cost.go: checks, each
	// weighted 1 + depth/4, for the location strings the validator builds)
	// may be at most EvalBase plus EvalFactor per value of the input.
	EvalBase   = 1_000
	EvalFactor = 16
	// MaxDetails bounds the problems one invalid_input result lists; the
	// last says how many more there were.
	MaxDetails = 100
)

// jsonDepth returns the deepest nesting of objects and arrays in b, which
// must be valid JSON (a scalar is 0), stopping as soon as it passes limit;
// one pass, no recursion.
func jsonDepth(b []byte, limit int) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > limit {
					return deepest
				}
			}
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// depthError is the message of an input nested deeper than MaxInputDepth;
// it has no package prefix (it is written for the model).
func depthError() error {
	return fmt.Errorf("input nests deeper than %d levels of objects and arrays", MaxInputDepth)
}

// levels counts the values of a decoded instance at each depth (the root at
// 0, its members at 1, ...); ok is false when the instance nests deeper than
// MaxInputDepth. It walks with an explicit stack: no recursion.
func levels(v any) (counts []int, ok bool) {
	type item struct {
		v any
		d int
	}
	stack := []item{{v, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for len(counts) <= it.d {
			counts = append(counts, 0)
		}
		counts[it.d]++
		switch x := it.v.(type) {
		case map[string]any: // a container at d is JSON depth d+1
			if it.d+1 > MaxInputDepth {
				return counts, false
			}
			for _, m := range x {
				stack = append(stack, item{m, it.d + 1})
			}
		case []any:
			if it.d+1 > MaxInputDepth {
				return counts, false
			}
			for _, m := range x {
				stack = append(stack, item{m, it.d + 1})
			}
		}
	}
	return counts, true
}
