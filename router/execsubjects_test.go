package router

import (
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// The exec subject of a tool is the one bus builds, kept: no allocation
// per call once known, and the cache starts again past its bound.
func TestExecSubjects(t *testing.T) {
	w := bus.NewSubjects("p").Workers
	var x execSubjects
	for _, tool := range []string{"echo", "echo", "other"} {
		if got := x.of(w, tool); got != w.Exec(tool) {
			t.Fatalf("%s: %s, want %s", tool, got, w.Exec(tool))
		}
	}
	if got := (*execSubjects)(nil).of(w, "echo"); got != w.Exec("echo") {
		t.Fatalf("nil cache: %s", got)
	}
	if n := testing.AllocsPerRun(100, func() { x.of(w, "echo") }); n != 0 {
		t.Fatalf("%.1f allocations per known subject", n)
	}
	for i := range maxExecSubjects + 1 {
		x.of(w, fmt.Sprintf("t%d", i))
	}
	if len(x.m) > maxExecSubjects {
		t.Fatalf("%d subjects kept", len(x.m))
	}
}
