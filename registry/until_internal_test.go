package registry

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// scanned is what Live and ExecForm answered before liveUntil: every
// worker's beat of tool read against the cutoff.
func scanned(l *liveness, tool string) (bool, bus.ExecForm) {
	cutoff := l.cutoff()
	live, form := false, bus.ExecCompact
	for _, b := range l.beats[tool] {
		if b.live(cutoff) {
			live, form = true, min(form, b.form)
		}
	}
	if !live {
		return false, bus.ExecStructured
	}
	return true, form
}

// TestLiveUntil: Live and ExecForm read each tool's live-until times, which
// every change of its beats keeps; the clock moves on between the changes,
// so workers expire one exec form after the other.
func TestLiveUntil(t *testing.T) {
	const str, bin, cpt = bus.ExecStructured, bus.ExecBinary, bus.ExecCompact
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	type step struct {
		at     time.Duration // the clock, after t0
		worker string        // its beat of "t" ("u:<w>": of "u"); "": only the clock moves
		b      beat          // at is set to the clock
		remove bool
	}
	type want struct {
		at   time.Duration
		live bool
		form bus.ExecForm
	}
	for _, tc := range []struct {
		name  string
		steps []step
		wants []want // asked after the steps, in order
	}{
		{"one beat expires", []step{{0, "w1", beat{rev: 1, form: cpt}, false}},
			[]want{{0, true, cpt}, {2999 * time.Millisecond, true, cpt}, {3 * time.Second, false, str}}},
		{"the last worker stops beating", []step{
			{0, "w1", beat{rev: 1}, false}, {0, "w2", beat{rev: 2}, false}, {2 * time.Second, "w2", beat{rev: 3}, false}},
			[]want{{4 * time.Second, true, str}, {5 * time.Second, false, str}}},
		{"forms expire one by one", []step{
			{0, "w1", beat{rev: 1, form: str}, false}, {time.Second, "w2", beat{rev: 2, form: bin}, false},
			{2 * time.Second, "w3", beat{rev: 3, form: cpt}, false}},
			[]want{{2 * time.Second, true, str}, {3500 * time.Millisecond, true, bin}, {4500 * time.Millisecond, true, cpt},
				{5500 * time.Millisecond, false, str}}},
		{"a worker changes form", []step{
			{0, "w1", beat{rev: 1, form: str}, false}, {time.Second, "w1", beat{rev: 2, form: cpt}, false}},
			[]want{{time.Second, true, cpt}, {3500 * time.Millisecond, true, cpt}, {4 * time.Second, false, str}}},
		{"the structured worker leaves", []step{
			{0, "w1", beat{rev: 1, form: str}, false}, {0, "w2", beat{rev: 2, form: cpt}, false},
			{time.Second, "w1", beat{rev: 3, left: true}, false}},
			[]want{{time.Second, true, cpt}}},
		{"the compact worker is deleted", []step{
			{0, "w1", beat{rev: 1, form: bin}, false}, {0, "w2", beat{rev: 2, form: cpt}, false},
			{time.Second, "w2", beat{rev: 3}, true}},
			[]want{{time.Second, true, bin}}},
		{"every worker deleted", []step{{0, "w1", beat{rev: 1}, false}, {0, "w1", beat{rev: 2}, true}},
			[]want{{0, false, str}}},
		{"an older revision changes nothing", []step{
			{0, "w1", beat{rev: 2, form: cpt}, false}, {time.Second, "w1", beat{rev: 1, left: true}, false}},
			[]want{{time.Second, true, cpt}}},
		{"another tool's beats", []step{{0, "u:w1", beat{rev: 1, form: cpt}, false}},
			[]want{{0, false, str}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			l := newLiveness(&now)
			for _, s := range tc.steps {
				now = t0.Add(s.at)
				tool, worker := "t", s.worker
				if w, ok := strings.CutPrefix(worker, "u:"); ok {
					tool, worker = "u", w
				}
				if !s.b.left && !s.remove {
					s.b.at = now
				}
				l.setBeat(tool, worker, s.b, s.remove)
			}
			for _, w := range tc.wants {
				now = t0.Add(w.at)
				live, form := l.Live(&Tool{Def: bus.ToolDef{Name: "t"}}), l.ExecForm("t")
				if live != w.live || form != w.form {
					t.Errorf("at %v: Live, ExecForm = %v, %v; want %v, %v", w.at, live, form, w.live, w.form)
				}
				if sl, sf := scanned(l, "t"); sl != live || sf != form {
					t.Errorf("at %v: the scan of the beats says %v, %v", w.at, sl, sf)
				}
			}
		})
	}
}

// TestLiveUntilAgreesWithScan: through random beats, leaves, deletes,
// beats seen but not stored, reads and leaves of two tools' workers, with
// the clock moving on, Live and ExecForm answer what a scan of the beats
// does, after every change.
func TestLiveUntilAgreesWithScan(t *testing.T) {
	rnd := rand.New(rand.NewPCG(29, 6))
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	now := t0
	l := newLiveness(&now)
	rev := uint64(0)
	for i := range 20000 {
		now = now.Add(time.Duration(rnd.IntN(400)) * time.Millisecond)
		tool, worker := []string{"t", "u"}[rnd.IntN(2)], fmt.Sprintf("w%d", rnd.IntN(4))
		form := bus.ExecForm(rnd.IntN(3))
		rev += uint64(rnd.IntN(2)) // a repeated revision is ignored
		switch rnd.IntN(6) {
		case 0:
			l.setBeat(tool, worker, beat{rev: rev, left: true}, false)
		case 1:
			l.setBeat(tool, worker, beat{rev: rev}, true)
		case 2:
			l.sawBeat(tool, worker, nil, form, nil)
		case 3:
			_, done := l.read(worker, "", map[string]*bus.WorkerBeat{tool: {Binary: form > 0, Compact: form > 1}})
			done()
		default:
			l.setBeat(tool, worker, beat{at: now, rev: rev, form: form}, false)
		}
		for _, name := range []string{"t", "u"} {
			live, form := l.Live(&Tool{Def: bus.ToolDef{Name: name}}), l.ExecForm(name)
			if sl, sf := scanned(l, name); sl != live || sf != form {
				t.Fatalf("step %d, tool %s: Live, ExecForm = %v, %v; the scan says %v, %v (%+v)", i, name, live, form, sl, sf, l.beats[name])
			}
		}
	}
	if len(l.until.m) != len(l.beats) {
		t.Fatalf("live-until kept for %d tools, beats for %d", len(l.until.m), len(l.beats))
	}
}
