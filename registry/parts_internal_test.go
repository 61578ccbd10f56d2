package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// The parts of Registry are tested alone here, without a server.

func newLiveness(now *time.Time) *liveness {
	return &liveness{heartbeat: time.Second, now: func() time.Time { return *now }, version: new(atomic.Uint64),
		beats: map[string]map[string]beat{}}
}

func TestLivenessAnswers(t *testing.T) {
	const str, bin, cpt = bus.ExecStructured, bus.ExecBinary, bus.ExecCompact
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	type seen struct {
		tool, worker string
		b            beat
		remove       bool
	}
	for _, tc := range []struct {
		name    string
		beats   []seen
		after   time.Duration // the clock when asked, after t0
		live    bool          // for tool "t"
		form    bus.ExecForm  // of tool "t"
		mayHold bool          // call key "s.r.c"
		workers int
	}{
		{"none", nil, 0, false, str, false, 0},
		{"fresh beat", []seen{{"t", "w1", beat{at: t0, rev: 1, inflight: []string{}}, false}}, time.Second, true, str, false, 1},
		{"holds the call", []seen{{"t", "w1", beat{at: t0, rev: 1, inflight: []string{"s.r.c"}}, false}}, 0, true, str, true, 1},
		{"does not say: may hold", []seen{{"t", "w1", beat{at: t0, rev: 1}, false}}, 0, true, str, true, 1},
		{"three heartbeats: gone", []seen{{"t", "w1", beat{at: t0, rev: 1}, false}}, 3 * time.Second, false, str, false, 0},
		{"left", []seen{{"t", "w1", beat{at: t0, rev: 2, left: true}, false}}, 0, false, str, false, 0},
		{"older revision ignored", []seen{{"t", "w1", beat{at: t0, rev: 2}, false}, {"t", "w1", beat{at: t0, rev: 1, left: true}, false}}, 0, true, str, true, 1},
		{"deleted", []seen{{"t", "w1", beat{at: t0, rev: 1}, false}, {"t", "w1", beat{rev: 2}, true}}, 0, false, str, false, 0},
		{"all binary", []seen{{"t", "w1", beat{at: t0, rev: 1, form: bin}, false}, {"t", "w2", beat{at: t0, rev: 2, form: bin}, false}}, 0, true, bin, true, 2},
		{"one structured", []seen{{"t", "w1", beat{at: t0, rev: 1, form: bin}, false}, {"t", "w2", beat{at: t0, rev: 2}, false}}, 0, true, str, true, 2},
		{"all compact", []seen{{"t", "w1", beat{at: t0, rev: 1, form: cpt}, false}, {"t", "w2", beat{at: t0, rev: 2, form: cpt}, false}}, 0, true, cpt, true, 2},
		{"one binary beside compact", []seen{{"t", "w1", beat{at: t0, rev: 1, form: cpt}, false}, {"t", "w2", beat{at: t0, rev: 2, form: bin}, false}}, 0, true, bin, true, 2},
		{"compact gone: the binary one decides", []seen{{"t", "w1", beat{at: t0, rev: 1, form: cpt}, false}, {"t", "w1", beat{at: t0, rev: 2, left: true, form: cpt}, false}, {"t", "w2", beat{at: t0, rev: 3, form: bin}, false}}, 0, true, bin, true, 1},
		{"binary gone: compact", []seen{{"t", "w1", beat{at: t0, rev: 1, form: cpt}, false}, {"t", "w2", beat{at: t0, rev: 2, form: bin}, false}, {"t", "w2", beat{at: t0, rev: 3, left: true}, false}}, 0, true, cpt, true, 1},
		{"another tool", []seen{{"u", "w1", beat{at: t0, rev: 1}, false}}, 0, false, str, false, 0},
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
			if got := l.ExecForm("t"); got != tc.form {
				t.Errorf("ExecForm = %v, want %v", got, tc.form)
			}
			if got := l.MayHold("t", "s.r.c"); got != tc.mayHold {
				t.Errorf("MayHold = %v, want %v", got, tc.mayHold)
			}
			if got := len(l.Workers()["t"]); got != tc.workers {
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
	l.sawBeat("t", "w1", []string{"s.r.c"}, bus.ExecCompact, nil)
	if !l.liveExcept("t", "") || l.liveExcept("t", "w1") || l.ExecForm("t") != bus.ExecCompact || l.version.Load() == v {
		t.Fatalf("a beat seen but not stored does not count: %+v", l.beats)
	}
	if l.beats["t"]["w1"].rev != 5 {
		t.Fatalf("a beat seen but not stored changed the revision: %+v", l.beats["t"]["w1"])
	}
	if l.Troubled() {
		t.Fatal("troubled before any failed write")
	}
	l.trouble = now
	if now = now.Add(3 * time.Second); !l.Troubled() {
		t.Fatal("trouble does not last four heartbeats")
	}
	if now = now.Add(time.Second); l.Troubled() {
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

// TestBeatCountsWhenRead: a heartbeat that repeats its definitions counts
// as soon as the router reads it, before (and without) any KV write: the
// exec watchdog must not take a worker that beat on time for gone because
// the liveness writes of a loaded server were slow. A worker that left
// is not brought back by it.
func TestBeatCountsWhenRead(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	holding := &bus.WorkerBeat{InFlight: []string{"s.r.c"}}
	for _, tc := range []struct {
		name   string
		cached *beat           // w1's beat for "t" before, at t0
		left   bool            // this router read w1's leave before the beat
		bv     *bus.WorkerBeat // the beat read; nil: a new or changed definition
		counts bool
	}{
		{"repeated definition", &beat{at: t0, rev: 1, inflight: []string{}}, false, holding, true},
		{"worker new here", nil, false, holding, true},
		{"changed definition", &beat{at: t0, rev: 1, inflight: []string{}}, false, nil, false},
		{"cached beat says left", &beat{rev: 2, left: true}, false, holding, false},
		{"leave read before", &beat{at: t0, rev: 1, inflight: []string{}}, true, holding, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			l := newLiveness(&now) // no bucket: a write would panic
			if tc.cached != nil {
				l.setBeat("t", "w1", *tc.cached, false)
			}
			earlier := &reading{worker: "w0"}
			if tc.left { // kept while a registration read before it is applied
				l.order.opened(earlier)
				seq := l.order.leave("w1", []string{"t"})
				l.order.landed("w1", []string{"t"}, seq)
			}
			now = t0.Add(2500 * time.Millisecond) // the beat at t0 is nearly stale
			rd, done := l.read("w1", "", map[string]*bus.WorkerBeat{"t": tc.bv})
			now = t0.Add(5 * time.Second) // past the beat at t0, not the one read
			if got := l.MayHold("t", "s.r.c"); got != tc.counts {
				t.Errorf("MayHold = %v, want %v", got, tc.counts)
			}
			if got := l.liveExcept("t", ""); got != tc.counts {
				t.Errorf("live = %v, want %v", got, tc.counts)
			}
			want := seenBeat{}
			if tc.cached != nil {
				want = seenBeat{rev: tc.cached.rev, left: tc.cached.left}
			}
			want.left = want.left || tc.left
			if rd.seen["t"] != want {
				t.Errorf("read against %+v, want %+v", rd.seen["t"], want)
			}
			done()
			if tc.left {
				l.order.closed(earlier.seq)
			}
			if len(l.order.open) != 0 || len(l.order.leaves) != 0 {
				t.Errorf("order kept after the registration: %+v", l.order)
			}
		})
	}
}

// TestBeatReadBeforeLeave: a beat read before the worker's leave never
// undoes it, whichever of their writes lands first and whichever router
// stored the leave; a beat read after the leave brings the worker back
// once it is stored (a worker restarted with its id).
func TestBeatReadBeforeLeave(t *testing.T) {
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	bv := bus.WorkerBeat{InFlight: []string{}}
	beats := map[string]*bus.WorkerBeat{"t": &bv}
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		// during runs in the beat's write (fakeKV.before), after the
		// beat was read and before its write is stored
		during func(t *testing.T, l *liveness, kv *fakeKV)
		writes int  // stored after the beat was read
		first  bool // the worker's first registration: nothing cached or stored
	}{
		{"leave applied before the write", func(t *testing.T, l *liveness, kv *fakeKV) {
			if err := l.leave(ctx, "w1", "", ""); err != nil {
				t.Fatal(err)
			}
		}, 1, false},
		{"leave stored by another router", func(t *testing.T, l *liveness, kv *fakeKV) {
			kv.store("t.w1", bus.WorkerLeft) // this cache does not know yet
		}, 1, false},
		{"leave read while the beat is written", func(t *testing.T, l *liveness, kv *fakeKV) {
			kv.after = func() { // the beat is stored, not yet acknowledged
				kv.before = func() {
					// The watch delivers the beat while the leave is written.
					l.applyWorker(kv.entry("t.w1"))
					if l.liveExcept("t", "") {
						t.Error("a beat stored before the leave brought the worker back while the leave was written")
					}
				}
				if err := l.leave(ctx, "w1", "", ""); err != nil {
					t.Error(err)
				}
			}
		}, 2, false},
		{"leave read, then the store refuses the beat", func(t *testing.T, l *liveness, kv *fakeKV) {
			if err := l.leave(ctx, "w1", "", ""); err != nil {
				t.Fatal(err)
			}
			kv.refuse = true
		}, 1, false},
		{"leave read before the first write", func(t *testing.T, l *liveness, kv *fakeKV) {
			if err := l.leave(ctx, "w1", "", ""); err != nil {
				t.Fatal(err)
			}
		}, 1, true}, // the leave's write covers the tool
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := &fakeKV{}
			l := newLiveness(&now)
			l.kv = kv
			var rev uint64
			read := beats
			if tc.first {
				read = map[string]*bus.WorkerBeat{"t": nil} // counts once stored
			} else {
				rev = kv.store("t.w1", bv.Encode())
				l.setBeat("t", "w1", beat{at: now, rev: rev, inflight: []string{}}, false)
			}
			rd, done := l.read("w1", "", read)
			kv.before = func() { tc.during(t, l, kv) }
			if err := l.record(ctx, "t", bv, rd); err != nil && !kv.refuse {
				t.Fatal(err)
			}
			done()
			kv.before, kv.after, kv.refuse = nil, nil, false
			if l.liveExcept("t", "") {
				t.Fatalf("the worker is live after its leave: %+v", l.beats["t"]["w1"])
			}
			if e := kv.entry("t.w1"); !bus.DecodeWorkerBeat(e.Value()).Left || e.Revision() != rev+uint64(tc.writes) {
				t.Fatalf("stored %s at revision %d, want the leave at %d", e.Value(), e.Revision(), rev+uint64(tc.writes))
			}
			if len(l.order.leaves) != 0 {
				t.Errorf("leave kept after everything landed: %+v", l.order.leaves)
			}
			// Read after the leave: it counts once stored.
			rd, done = l.read("w1", "", beats)
			if l.liveExcept("t", "") {
				t.Fatal("a beat read after the leave counted before it was stored")
			}
			if err := l.record(ctx, "t", bv, rd); err != nil {
				t.Fatal(err)
			}
			done()
			if !l.liveExcept("t", "") || bus.DecodeWorkerBeat(kv.entry("t.w1").Value()).Left {
				t.Fatal("a worker that beats again after its leave is not back")
			}
		})
	}
}

// TestBeatsKeepReadOrder: of two beats of one worker read in turn and
// stored in either order, the later read is what counts and what is
// stored: the earlier one, stored last or seen by the watch, does not
// hide a call in flight that only the later one lists.
func TestBeatsKeepReadOrder(t *testing.T) {
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	ctx := t.Context()
	older, newer := bus.WorkerBeat{InFlight: []string{}}, bus.WorkerBeat{InFlight: []string{"s.r.c"}}
	for _, olderFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("older stored first ", olderFirst), func(t *testing.T) {
			kv := &fakeKV{}
			l := newLiveness(&now)
			l.kv = kv
			l.setBeat("t", "w1", beat{at: now, rev: kv.store("t.w1", older.Encode()), inflight: []string{}}, false)
			rd1, done1 := l.read("w1", "", map[string]*bus.WorkerBeat{"t": &older})
			rd2, done2 := l.read("w1", "", map[string]*bus.WorkerBeat{"t": &newer})
			holds := func(when string) {
				t.Helper()
				if !l.MayHold("t", "s.r.c") {
					t.Fatalf("%s: the call listed by the later beat is not held: %+v", when, l.beats["t"]["w1"])
				}
			}
			holds("both read")
			first, second := rd2, rd1
			fb, sb := newer, older
			if olderFirst {
				first, second, fb, sb = rd1, rd2, older, newer
			}
			if err := l.record(ctx, "t", fb, first); err != nil {
				t.Fatal(err)
			}
			holds("one stored")
			l.applyWorker(kv.entry("t.w1")) // the watch
			holds("the watch delivered it")
			if err := l.record(ctx, "t", sb, second); err != nil {
				t.Fatal(err)
			}
			holds("both stored")
			if got := bus.DecodeWorkerBeat(kv.entry("t.w1").Value()); !slices.Equal(got.InFlight, newer.InFlight) {
				t.Fatalf("stored %+v, want the later beat", got)
			}
			done1()
			done2()
			// Once both are applied, the watch counts as ever (another
			// router's beat).
			kv.store("t.w1", older.Encode())
			l.applyWorker(kv.entry("t.w1"))
			if l.MayHold("t", "s.r.c") {
				t.Fatal("a later beat seen by the watch does not count")
			}
		})
	}
}

// fakeKV is the part of a bucket that liveness writes, with revisions
// and compare-and-set; before and after, when set, run once around the
// next write (after once it is stored, before it returns).
type fakeKV struct {
	jetstream.KeyValue
	rev           uint64
	vals          map[string]*fakeEntry
	before, after func()
	refuse        bool // fail the next write as a store that is down
}

func (f *fakeKV) store(key string, v []byte) uint64 {
	if f.vals == nil {
		f.vals = map[string]*fakeEntry{}
	}
	f.rev++
	f.vals[key] = &fakeEntry{key: key, val: v, rev: f.rev}
	return f.rev
}

func (f *fakeKV) entry(key string) jetstream.KeyValueEntry { return f.vals[key] }

// write stores v at key when the key's revision is rev (any: -1).
func (f *fakeKV) write(key string, v []byte, rev int64) (uint64, error) {
	if h := f.before; h != nil {
		f.before = nil
		h()
	}
	if f.refuse {
		return 0, errors.New("refused")
	}
	cur := int64(0)
	if e := f.vals[key]; e != nil {
		cur = int64(e.rev)
	}
	if rev >= 0 && cur != rev {
		return 0, jetstream.ErrKeyExists
	}
	n := f.store(key, v)
	if h := f.after; h != nil {
		f.after = nil
		h()
	}
	return n, nil
}

func (f *fakeKV) Put(_ context.Context, key string, v []byte) (uint64, error) {
	return f.write(key, v, -1)
}

func (f *fakeKV) Create(ctx context.Context, key string, v []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return f.Update(ctx, key, v, 0)
}

func (f *fakeKV) Update(_ context.Context, key string, v []byte, rev uint64) (uint64, error) {
	return f.write(key, v, int64(rev))
}

func (f *fakeKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	if e := f.vals[key]; e != nil {
		return e, nil
	}
	return nil, jetstream.ErrKeyNotFound
}

type fakeEntry struct {
	jetstream.KeyValueEntry
	key string
	val []byte
	rev uint64
}

func (e *fakeEntry) Key() string                     { return e.key }
func (e *fakeEntry) Value() []byte                   { return e.val }
func (e *fakeEntry) Revision() uint64                { return e.rev }
func (e *fakeEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
