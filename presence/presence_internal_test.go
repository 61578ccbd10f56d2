package presence

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is a watch delivery of the presence bucket.
type entry struct {
	key   string
	value []byte
	op    jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return "toolbus_routers" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return 1 }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

// mine is this router's own renewal, as its watch delivers it: the watch
// then has delivered everything put before it.
func mine(p *Presence) entry { return entry{key: p.cfg.ID, value: p.value, op: jetstream.KeyValuePut} }

func put(id, instance string) entry {
	v, _ := json.Marshal(Value{Router: id, Instance: instance, HeartbeatMS: 1000})
	return entry{key: id, value: v, op: jetstream.KeyValuePut}
}

// TestStaleness walks the staleness rule on the bubble's clock: a router
// that ended something at t0 (as the watching router saw it) is judged at
// each step from what the watch delivered of its key, the watch current (it
// delivers this router's own renewal at each step: TestWatchBehind has it
// not). The heartbeat is 1 s, so a lease is 3 s.
func TestStaleness(t *testing.T) {
	const hb = time.Second
	type step struct {
		after time.Duration // since the previous step
		see   []entry       // deliveries at this step
		want  Verdict       // Judge("a", t0, now)
	}
	renew := func(after time.Duration, want Verdict) step {
		return step{after: after, see: []entry{put("a", "i1")}, want: want}
	}
	for _, tc := range []struct {
		name  string
		setup []entry // before t0
		steps []step
	}{
		{name: "a router that renews every heartbeat outlives the end a lease later", setup: []entry{put("a", "i1")},
			steps: []step{renew(hb, Unsure), renew(hb, Unsure), renew(hb-time.Millisecond, Unsure), renew(time.Millisecond, Outlived)}},
		{name: "a router that stops renewing at the end is gone once a lease has passed without it", setup: []entry{put("a", "i1")},
			steps: []step{{after: 3*hb - time.Millisecond, want: Unsure}, {after: time.Millisecond, want: Gone}}},
		{name: "a router that misses two beats is not gone", setup: []entry{put("a", "i1")},
			steps: []step{{after: 2 * hb, want: Unsure}, renew(hb, Outlived)}},
		{name: "a router that renewed once and stopped is gone three heartbeats after that renewal", setup: []entry{put("a", "i1")},
			steps: []step{renew(hb, Unsure), {after: 3 * hb, want: Unsure}, {after: time.Millisecond, want: Gone}}},
		{name: "a clean stop is gone at once", setup: []entry{put("a", "i1")},
			steps: []step{{after: hb, see: []entry{{key: "a", op: jetstream.KeyValueDelete}}, want: Gone}}},
		{name: "a purged key is gone at once", setup: []entry{put("a", "i1")},
			steps: []step{{after: hb, see: []entry{{key: "a", op: jetstream.KeyValuePurge}}, want: Gone}}},
		{name: "a restart under the same id is gone, however often the new process renews", setup: []entry{put("a", "i1")},
			steps: []step{{after: hb, see: []entry{put("a", "i2")}, want: Gone}, {after: 3 * hb, see: []entry{put("a", "i2")}, want: Gone}}},
		{name: "a stop and a start under the same id is gone", setup: []entry{put("a", "i1")},
			steps: []step{{after: hb, see: []entry{{key: "a", op: jetstream.KeyValueDelete}, put("a", "i1")}, want: Gone}}},
		{name: "a router never seen is gone a lease after the end", setup: []entry{put("b", "i1")},
			steps: []step{{want: Unsure}, {after: 3 * hb, see: []entry{put("b", "i1")}, want: Unsure}, {after: time.Millisecond, want: Gone}}},
		{name: "a router first seen after the end is another process", setup: []entry{put("b", "i9")},
			steps: []step{{after: hb, see: []entry{put("a", "i1")}, want: Gone}}},
		{name: "another router's renewals say nothing of this one", setup: []entry{put("a", "i1"), put("b", "i9")},
			steps: []step{{after: 2 * hb, see: []entry{put("b", "i9")}, want: Unsure}, {after: 2 * hb, see: []entry{put("b", "i9")}, want: Gone}}},
		{name: "a value that is not JSON changes nothing", setup: []entry{put("a", "i1")},
			steps: []step{{after: hb, see: []entry{{key: "a", value: []byte("x"), op: jetstream.KeyValuePut}}, want: Unsure}, {after: 2*hb + 1, want: Gone}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New(nil, Config{ID: "me", Heartbeat: hb})
				for _, e := range tc.setup {
					p.apply(e)
				}
				time.Sleep(time.Millisecond) // the end comes after the setup's deliveries
				t0 := time.Now()
				for i, s := range tc.steps {
					time.Sleep(s.after)
					for _, e := range append(s.see, mine(p)) {
						p.apply(e)
					}
					if got := p.Judge("a", t0); got != s.want {
						t.Fatalf("step %d (%v after the end): %v, want %v", i, time.Since(t0), got, s.want)
					}
				}
			})
		})
	}
}

// TestBounded: past MaxRouters keys the watch keeps no more; those routers
// count as gone (a republish the stream de-duplicates), and the ones kept
// are still judged.
func TestBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(nil, Config{ID: "me", Heartbeat: time.Second})
		for i := range MaxRouters + 10 {
			id := "r" + string(rune('a'+i%26)) + time.Duration(i).String()
			p.apply(put(id, id))
		}
		if n := len(p.peers); n != MaxRouters {
			t.Fatalf("%d routers kept, want %d", n, MaxRouters)
		}
		if got := p.Judge("ra0s", time.Now()); got != Unsure {
			t.Fatalf("a kept router: %v", got)
		}
	})
}

// TestHeldRouterJudges: "a" ended something as it renewed its key (t0,
// by this router's clock); this router then is held (no tick of its clock,
// no delivery: SIGSTOP, a starved process) and resumes, judging "a" at its
// first tick back, before the renewals that waited, and again after it ran
// on. The clock (internal/held) leaves the hold out: a renewing router is
// never gone, and one that stopped is gone a lease of the clock after its
// last renewal, at the tick's boundary. By the wall clock (before session
// 30) every held case was gone as it resumed. Heartbeat 1 s, ticks 100 ms.
func TestHeldRouterJudges(t *testing.T) {
	const hb, tick = time.Second, 100 * time.Millisecond
	const held = 3*hb + hb/2
	for _, tc := range []struct {
		name          string
		hold          time.Duration // after t0 the router is held this long
		renews        bool          // "a" renews every heartbeat; else t0 was its last renewal
		run           time.Duration // then the router runs this long, ticking
		resumed, want Verdict       // as it resumes (at t0 when not held), and after run
	}{
		{"not held, renewing: a lease after the end, outlived", 0, true, 3 * hb, Unsure, Outlived},
		{"not held, renewing: a tick short of a lease", 0, true, 3*hb - tick, Unsure, Unsure},
		{"held past a lease, renewing: not gone as it resumes, outlived a lease of the clock later", held, true, 3 * hb, Unsure, Outlived},
		{"not held, stopped: a lease after its last renewal", 0, false, 3 * hb, Unsure, Unsure},
		{"not held, stopped: a tick past a lease, gone", 0, false, 3*hb + tick, Unsure, Gone},
		{"held past a lease, stopped: a lease of the clock after its last renewal", held, false, 3*hb - 2*tick, Unsure, Unsure},
		{"held past a lease, stopped: a tick past a lease of the clock, gone", held, false, 3*hb - tick, Unsure, Gone},
		{"held an hour, stopped: not gone as it resumes", time.Hour, false, 0, Unsure, Unsure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New(nil, Config{ID: "me", Heartbeat: hb})
				p.clock.Tick()
				p.apply(put("a", "i1"))
				p.apply(mine(p))
				t0 := p.Now()
				var waited []entry // "a"'s renewals sent while this router was held
				if tc.renews {
					waited = make([]entry, tc.hold/hb)
					for i := range waited {
						waited[i] = put("a", "i1")
					}
				}
				if tc.hold > 0 {
					time.Sleep(tc.hold)
					p.clock.Tick() // the first tick back
				}
				if got := p.Judge("a", t0); got != tc.resumed {
					t.Fatalf("as it resumed (clock %v after the end): %v, want %v", p.Now().Sub(t0), got, tc.resumed)
				}
				for _, e := range waited {
					p.apply(e)
				}
				for i := 1; i <= int(tc.run/tick); i++ {
					time.Sleep(tick)
					p.clock.Tick()
					if tc.renews && i%int(hb/tick) == 0 {
						p.apply(put("a", "i1"))
					}
				}
				p.apply(mine(p)) // the watch current
				if got := p.Judge("a", t0); got != tc.want {
					t.Fatalf("after running %v (clock %v after the end): %v, want %v", tc.run, p.Now().Sub(t0), got, tc.want)
				}
			})
		})
	}
}

// TestWatchBehind: the watch delivers nothing, or not this router's own
// renewals, for a while (a consumer lost with its connection and being made
// again, a lag); "a" ended something at t0. While the watch is behind no
// absence is judged, however long; a deletion still is; once the watch
// reads again (this router's own renewal comes back, after what was put
// before it), "a" is judged on the lease as before. "me" in a step is this
// router's own renewal. Heartbeat 1 s, a lease 3 s.
func TestWatchBehind(t *testing.T) {
	const hb = time.Second
	me := entry{key: "me"}
	type step struct {
		after time.Duration // since the previous step
		see   []entry       // deliveries at this step
		want  Verdict       // Judge("a", t0)
	}
	a := put("a", "i1")
	for _, tc := range []struct {
		name  string
		setup []entry // before t0
		steps []step
	}{
		{name: "behind past a lease while a renews: not gone, outlived once the renewals that waited arrive", setup: []entry{a, me},
			steps: []step{{after: 3*hb + time.Millisecond, want: Unsure}, {after: 2 * hb, want: Unsure}, {see: []entry{a, me, a, me, a, me, a, me, a, me}, want: Outlived}}},
		{name: "behind past a lease, a stopped at the end: unsure while behind, gone once the watch reads again", setup: []entry{a, me},
			steps: []step{{after: 5 * hb, want: Unsure}, {after: time.Hour, want: Unsure}, {see: []entry{me}, want: Gone}}},
		{name: "current again with a renewal that waited: gone a lease after it, as before", setup: []entry{a, me},
			steps: []step{{after: 2 * hb, want: Unsure}, {see: []entry{a, me}, want: Unsure}, {after: 3 * hb, see: []entry{me}, want: Unsure}, {after: time.Millisecond, see: []entry{me}, want: Gone}}},
		{name: "a heartbeat behind: gone a heartbeat later", setup: []entry{a, me},
			steps: []step{{after: 2*hb + hb/2, see: []entry{me}, want: Unsure}, {after: hb, want: Unsure}, {see: []entry{me}, want: Gone}}},
		{name: "another router's renewals arrive, its own do not: a's absence is not judged", setup: []entry{a, put("b", "i9"), me},
			steps: []step{{after: 2 * hb, see: []entry{put("b", "i9")}, want: Unsure}, {after: 2 * hb, see: []entry{put("b", "i9")}, want: Unsure}, {see: []entry{me}, want: Gone}}},
		{name: "another process's renewals under this router's id are not its own", setup: []entry{a, me},
			steps: []step{{after: 4 * hb, see: []entry{put("me", "other")}, want: Unsure}}},
		{name: "a clean stop is gone while behind", setup: []entry{a, me},
			steps: []step{{after: 4 * hb, see: []entry{{key: "a", op: jetstream.KeyValueDelete}}, want: Gone}}},
		{name: "a router never seen is not gone while behind", setup: []entry{put("b", "i9"), me},
			steps: []step{{after: 5 * hb, want: Unsure}, {see: []entry{me}, want: Gone}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New(nil, Config{ID: "me", Heartbeat: hb})
				see := func(es []entry) {
					for _, e := range es {
						if e.key == "me" && e.value == nil {
							e = mine(p)
						}
						p.apply(e)
					}
				}
				see(tc.setup)
				time.Sleep(time.Millisecond)
				t0 := time.Now()
				for i, s := range tc.steps {
					time.Sleep(s.after)
					see(s.see)
					if got := p.Judge("a", t0); got != s.want {
						t.Fatalf("step %d (%v after the end): %v, want %v", i, time.Since(t0), got, s.want)
					}
				}
			})
		})
	}
}
