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

// The watches in flight are a list: each removal, at the head, in the
// middle or at the end, leaves exactly the others, and a watch may be
// added again once removed (a call's next attempt).
func TestExecWatchesList(t *testing.T) {
	var x execWatches
	var ws [4]execWatch
	list := func() (keys string) {
		for w := x.head; w != nil; w = w.next {
			keys += w.key
		}
		return keys
	}
	for i := range ws {
		x.add(&ws[i], "t", fmt.Sprint(i), func() {})
	}
	for _, step := range []struct {
		remove int
		want   string
	}{{3, "210"}, {1, "20"}, {0, "2"}, {2, ""}} {
		x.remove(&ws[step.remove])
		if got := list(); got != step.want {
			t.Fatalf("after removing %d: %q, want %q", step.remove, got, step.want)
		}
	}
	x.add(&ws[1], "t", "1", func() {})
	x.add(&ws[2], "t", "2", func() {})
	x.remove(&ws[2])
	if got := list(); got != "1" {
		t.Fatalf("added again: %q", got)
	}
}
