package audit

import (
	"fmt"
	"testing"
	"time"
)

// TestRefusals: each caller gets RefusalBurst records per window; the
// refusals past it are counted and reported with the caller's next
// record; callers do not share a window; the table stays bounded.
func TestRefusals(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var r Refusals
	for i := range RefusalBurst {
		if ok, n := r.Take("session-s1", t0); !ok || n != 0 {
			t.Fatalf("refusal %d: %v %d, want recorded", i, ok, n)
		}
	}
	for range 5 {
		if ok, _ := r.Take("session-s1", t0.Add(time.Second)); ok {
			t.Fatal("a refusal past the burst was recorded")
		}
	}
	if ok, n := r.Take("session-s2", t0.Add(time.Second)); !ok || n != 0 {
		t.Fatalf("another caller: %v %d", ok, n)
	}
	if ok, n := r.Take("session-s1", t0.Add(RefusalWindow)); !ok || n != 5 {
		t.Fatalf("next window: %v %d, want recorded with 5 suppressed", ok, n)
	}
	if ok, n := r.Take("session-s1", t0.Add(RefusalWindow+time.Second)); !ok || n != 0 {
		t.Fatalf("after the report: %v %d", ok, n)
	}
	for i := range 2 * maxCallers {
		r.Take(fmt.Sprintf("c%d", i), t0.Add(2*RefusalWindow))
	}
	if len(r.m) > maxCallers {
		t.Fatalf("%d callers followed, want at most %d", len(r.m), maxCallers)
	}
}
