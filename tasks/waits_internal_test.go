package tasks

import (
	"errors"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestWaitBounds: a session's waits stop at MaxSessionWaits, all waits at
// MaxWaits, each with limit_exceeded; a wait that returns frees its place.
func TestWaitBounds(t *testing.T) {
	var w waits
	limit := func(err error) bool { return errors.Is(err, &bus.Error{Code: bus.CodeLimitExceeded}) }
	for i := range MaxSessionWaits {
		if err := w.enter("s1"); err != nil {
			t.Fatalf("wait %d of s1: %v", i, err)
		}
	}
	if err := w.enter("s1"); !limit(err) {
		t.Fatalf("a wait past the session's bound: %v", err)
	}
	w.leave("s1")
	if err := w.enter("s1"); err != nil {
		t.Fatalf("a wait after one returned: %v", err)
	}
	for i := MaxSessionWaits; i < MaxWaits; i++ {
		if err := w.enter(fmt.Sprintf("s%d", 2+i/MaxSessionWaits)); err != nil {
			t.Fatalf("wait %d in all: %v", i, err)
		}
	}
	if err := w.enter("fresh"); !limit(err) {
		t.Fatalf("a wait past the bound of all waits: %v", err)
	}
	for range MaxSessionWaits {
		w.leave("s1")
	}
	if _, ok := w.bySession["s1"]; ok || w.all != MaxWaits-MaxSessionWaits {
		t.Fatalf("after s1's waits returned: %v, %d in all", w.bySession["s1"], w.all)
	}
}
