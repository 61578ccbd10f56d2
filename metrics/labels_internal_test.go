package metrics

import (
	"fmt"
	"sync"
	"testing"
)

// A label takes at most MaxLabelValues values, from any number of
// goroutines; a value it took stays its own, later ones count as OtherLabel.
func TestLabelsBound(t *testing.T) {
	var l labels
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range MaxLabelValues {
				l.of(fmt.Sprintf("v%d", (i*4+g)%(MaxLabelValues+512)))
			}
		})
	}
	wg.Wait()
	n := 0
	l.seen.Range(func(any, any) bool { n++; return true })
	if n != MaxLabelValues || int(l.n.Load()) != MaxLabelValues {
		t.Fatalf("%d values held (counted %d), want %d", n, l.n.Load(), MaxLabelValues)
	}
	l.seen.Range(func(k, _ any) bool {
		if got := l.of(k.(string)); got != k {
			t.Fatalf("a held value %q counts as %q", k, got)
		}
		return true
	})
	for i := range 2 * MaxLabelValues {
		v := fmt.Sprintf("new%d", i)
		if got := l.of(v); got != OtherLabel {
			t.Fatalf("value %q past the bound counts as %q", v, got)
		}
	}
}
