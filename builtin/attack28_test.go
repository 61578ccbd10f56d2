package builtin

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestAttackSearchPatternCost (session 28, red team): search_files
// compiles the model's pattern in the router's process (read-only: it runs
// without asking). Go's regexp program grows with repetition counts, so
// "a{1000}" × 3000 (21 KB) took 2 s and 700 MB allocated, 270 MB held for
// the search, and 60 KB of "[\pL\pN]" took 2 s to parse; a few such calls
// at once outgrow the router's memory limit. The pattern's Unicode classes
// and estimated program are bounded before it compiles: refused at once.
func TestAttackSearchPatternCost(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, base+"/a.txt", "aaa\nbbb\n")
	for name, p := range map[string]string{
		"repeats": strings.Repeat("a{1000}", 3000),
		"classes": strings.Repeat(`[\pL\pN]`, 7500),
		"nested":  strings.Repeat(`(?:(?:a|b){100}c){10}`, 100),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, err := f.Search(t.Context(), SearchIn{Pattern: p})
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		wantRefused(t, err, "too costly to compile")
		if grew := (after.TotalAlloc - before.TotalAlloc) >> 20; took > time.Second || grew > 32 {
			t.Errorf("%s: refused in %v with %d MiB allocated", name, took, grew)
		}
	}
	out, err := f.Search(t.Context(), SearchIn{Pattern: `^\pL{3}$|b{1,100}`})
	if err != nil || !strings.Contains(out, "a.txt:1:aaa") || !strings.Contains(out, "a.txt:2:bbb") {
		t.Fatalf("an ordinary pattern: %q %v", out, err)
	}
}
