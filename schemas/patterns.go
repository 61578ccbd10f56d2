package schemas

import (
	"fmt"
	"maps"
	"regexp/syntax"
	"slices"
	"strings"
)

// Bounds of a schema's patterns together ("pattern" and the keys of
// "patternProperties"): Go's regexp program grows with repetition counts
// (a{1000} is a thousand instructions, about 90 bytes each once compiled)
// and a Unicode class costs tens of microseconds to parse, neither of
// which the schema's size shows (TestAttackRegexProgramSize).
const (
	MaxPatternProgram = 4096 // estimated instructions of all the patterns
	MaxPatternClasses = 64   // Unicode class escapes (\p, \P) in all the patterns
)

// walk is what checkRefs counts over a schema.
type walk struct{ nodes, program, classes int }

// patterns adds the patterns of schema x to w, refusing them past the bounds.
func (w *walk) patterns(x map[string]any) error {
	var ps []string
	if p, ok := x["pattern"].(string); ok {
		ps = append(ps, p)
	}
	if m, ok := x["patternProperties"].(map[string]any); ok {
		ps = append(ps, slices.Sorted(maps.Keys(m))...)
	}
	for _, p := range ps {
		classes, program := PatternCost(p, MaxPatternClasses-w.classes)
		if w.classes += classes; w.classes > MaxPatternClasses {
			return fmt.Errorf("schemas: schema's patterns hold more than %d Unicode classes (\\p, \\P)", MaxPatternClasses)
		}
		if w.program += program; w.program > MaxPatternProgram {
			return fmt.Errorf("schemas: schema's patterns are too costly to compile: more than %d instructions (repetition counts multiply them)", MaxPatternProgram)
		}
	}
	return nil
}

// PatternCost returns the Unicode class escapes (\p, \P) of Go regular
// expression p, counted before parsing since the parse is what they cost,
// and, unless there are more than maxClasses, an estimate of the
// instructions Go compiles p into, never below it but for the program's
// fail and match (0 when p does not parse; saturating at 1<<30).
func PatternCost(p string, maxClasses int) (classes, program int) {
	if classes = strings.Count(p, `\p`) + strings.Count(p, `\P`); classes > maxClasses {
		return classes, 0
	}
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return classes, 0
	}
	return classes, programSize(re)
}

func programSize(re *syntax.Regexp) int {
	const most = 1 << 30
	n := 1
	if re.Op == syntax.OpLiteral { // one instruction a rune; a class is one
		n += len(re.Rune)
	}
	for _, s := range re.Sub {
		n = min(n+programSize(s), most)
	}
	if re.Op == syntax.OpRepeat {
		n = min(n*max(re.Min, re.Max, 1), most)
	}
	return n
}

// isRegex is the "regex" format (asserted by draft-07 schemas, say) without
// compiling the input's expression: Go's parse says whether it is one, and
// the compile costs what a pattern's program does (TestAttackRegexFormat).
func isRegex(v any) bool {
	s, ok := v.(string)
	if !ok {
		return true
	}
	if strings.Count(s, `\p`)+strings.Count(s, `\P`) > MaxPatternClasses {
		return false
	}
	_, err := syntax.Parse(s, syntax.Perl)
	return err == nil
}
