package registry_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
)

// TestAttackStaleExecForm (session 29): a call reads a tool's liveness and
// exec form from what was kept at its workers' last beats (liveUntil), no
// longer from every beat. A worker of a tool another worker serves in
// structured mode flips its declared form (compact, binary, structured),
// leaves and comes back, to leave behind a kept form that would have the
// router send compact execs the other worker cannot read; then it stops
// beating, or leaves, to leave its tool live. Each change is summarised
// anew from every beat of the tool, and each read compares with the clock.
func TestAttackStaleExecForm(t *testing.T) {
	c := newClock(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	r := start(t, newStore(t), registry.Config{Now: c.Now})
	beat := func(worker string, form bus.ExecForm, leaving bool) {
		t.Helper()
		reg := bus.Register{Worker: worker, Tools: []bus.ToolDef{def("t")}, BinaryExec: form > bus.ExecStructured,
			CompactExec: form == bus.ExecCompact, InFlight: map[string][]string{}, Leaving: leaving}
		if _, err := r.Register(t.Context(), registry.Shared, "", reg); err != nil {
			t.Fatal(err)
		}
	}
	want := func(when string, isLive bool, form bus.ExecForm) {
		t.Helper()
		if got, f := live(t, r, "t"), r.ExecForm("t"); got != isLive || f != form {
			t.Fatalf("%s: Live, ExecForm = %v, %v; want %v, %v", when, got, f, isLive, form)
		}
	}
	beat("plain", bus.ExecStructured, false)
	for i, form := range []bus.ExecForm{bus.ExecCompact, bus.ExecBinary, bus.ExecStructured, bus.ExecCompact} {
		beat("flip", form, false)
		want("flip's beat "+strconv.Itoa(i), true, bus.ExecStructured)
	}
	beat("flip", bus.ExecCompact, true)
	beat("flip", bus.ExecCompact, false) // back
	want("flip back", true, bus.ExecStructured)
	c.Add(2 * time.Second)
	beat("flip", bus.ExecCompact, false) // plain beats no more
	c.Add(time.Second)
	want("plain's beat three heartbeats old", true, bus.ExecCompact)
	beat("flip", bus.ExecCompact, true)
	want("flip left", false, bus.ExecStructured)
	beat("flip", bus.ExecBinary, false)
	want("flip back again", true, bus.ExecBinary)
	c.Add(3 * time.Second)
	want("flip stopped beating", false, bus.ExecStructured)
}
