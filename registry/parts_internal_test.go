package registry

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// The parts of Registry are tested alone here, without a server.

func newLiveness(now *time.Time) *liveness {
	return &liveness{heartbeat: time.Second, now: func() time.Time { return *now }, version: new(atomic.Uint64),
		beats: map[string]map[string]beat{}, probed: map[string]time.Time{}}
}

func TestLivenessAnswers(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	type seen struct {
		tool, worker string
		b            beat
		remove       bool
	}
	for _, tc := range []struct {
		name                  string
		beats                 []seen
		after                 time.Duration // the clock when asked, after t0
		live, binary, mayHold bool          // for tool "t" and call key "s.r.c"
		workers               int
	}{
		{"none", nil, 0, false, false, false, 0},
		{"fresh beat", []seen{{"t", "w1", beat{at: t0, rev: 1, inflight: []string{}}, false}}, time.Second, true, false, false, 1},
		{"holds the call", []seen{{"t", "w1", beat{at: t0, rev: 1, inflight: []string{"s.r.c"}}, false}}, 0, true, false, true, 1},
		{"does not say: may hold", []seen{{"t", "w1", beat{at: t0, rev: 1}, false}}, 0, true, false, true, 1},
		{"three heartbeats: gone", []seen{{"t", "w1", beat{at: t0, rev: 1}, false}}, 3 * time.Second, false, false, false, 0},
		{"left", []seen{{"t", "w1", beat{at: t0, rev: 2, left: true}, false}}, 0, false, false, false, 0},
		{"older revision ignored", []seen{{"t", "w1", beat{at: t0, rev: 2}, false}, {"t", "w1", beat{at: t0, rev: 1, left: true}, false}}, 0, true, false, true, 1},
		{"deleted", []seen{{"t", "w1", beat{at: t0, rev: 1}, false}, {"t", "w1", beat{rev: 2}, true}}, 0, false, false, false, 0},
		{"all binary", []seen{{"t", "w1", beat{at: t0, rev: 1, binary: true}, false}, {"t", "w2", beat{at: t0, rev: 2, binary: true}, false}}, 0, true, true, true, 2},
		{"one structured", []seen{{"t", "w1", beat{at: t0, rev: 1, binary: true}, false}, {"t", "w2", beat{at: t0, rev: 2}, false}}, 0, true, false, true, 2},
		{"another tool", []seen{{"u", "w1", beat{at: t0, rev: 1}, false}}, 0, false, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			l := newLiveness(&now)
			for _, s := range tc.beats {
				l.setBeat(s.tool, s.worker, s.b, s.remove)
			}
			now = t0.Add(tc.after)
			tool := &Tool{Def: bus.ToolDef{Name: "t"}}
			if got := l.Live(tool); got != tc.live {
				t.Errorf("Live = %v, want %v", got, tc.live)
			}
			if got := l.BinaryExec("t"); got != tc.binary {
				t.Errorf("BinaryExec = %v, want %v", got, tc.binary)
			}
			if got := l.MayHold("t", "s.r.c"); got != tc.mayHold {
				t.Errorf("MayHold = %v, want %v", got, tc.mayHold)
			}
			if got := l.Workers()["t"]; got != tc.workers {
				t.Errorf("Workers[t] = %d, want %d", got, tc.workers)
			}
			if !l.Live(&Tool{Def: bus.ToolDef{Name: "t", External: true}}) {
				t.Error("an external tool is not live")
			}
		})
	}
}

func TestLivenessSawBeatAndTrouble(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	l := newLiveness(&now)
	l.setBeat("t", "w1", beat{at: now.Add(-time.Hour), rev: 5}, false)
	v := l.version.Load()
	l.sawBeat("t", "w1", []string{"s.r.c"}, true)
	if !l.liveExcept("t", "") || l.liveExcept("t", "w1") || !l.BinaryExec("t") || l.version.Load() == v {
		t.Fatalf("a beat seen but not stored does not count: %+v", l.beats)
	}
	if l.beats["t"]["w1"].rev != 5 {
		t.Fatalf("a beat seen but not stored changed the revision: %+v", l.beats["t"]["w1"])
	}
	if l.Troubled(now) {
		t.Fatal("troubled before any failed write")
	}
	l.trouble = now
	if !l.Troubled(now.Add(3*time.Second)) || l.Troubled(now.Add(4*time.Second)) {
		t.Fatal("trouble does not last four heartbeats")
	}
}

func TestCatalogOrderAndRevisions(t *testing.T) {
	version := new(atomic.Uint64)
	c := newCatalog(nil, nil, version)
	put := func(name string, rev uint64, order int64, desc string) {
		c.put(&Tool{Def: bus.ToolDef{Name: name, Description: desc}, rev: rev, order: order})
	}
	put("b", 5, 10, "")
	put("a", 2, 20, "")
	put("c", 3, 10, "")
	put("b", 4, 10, "older")
	put("a", 4, 20, "newer")
	var names []string
	for _, tl := range c.Tools() {
		names = append(names, tl.Def.Name)
	}
	if !slices.Equal(names, []string{"b", "c", "a"}) {
		t.Fatalf("Tools in order %v, want b c a (registration time, then name)", names)
	}
	if b, _ := c.Lookup("b"); b.Def.Description != "" {
		t.Fatalf("an older revision replaced the tool: %+v", b.Def)
	}
	if a, _ := c.Lookup("a"); a.Def.Description != "newer" {
		t.Fatalf("a newer revision was not taken: %+v", a.Def)
	}
	if got := version.Load(); got != 4 {
		t.Fatalf("version %d after four changes", got)
	}
}
