package limits

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// ackLost is a rates bucket whose next update (once between is set) lands,
// then runs between (another router's call), then reports its
// acknowledgement lost: the writer cannot tell whether it landed.
type ackLost struct {
	jetstream.KeyValue
	between func()
}

func (h *ackLost) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := h.KeyValue.Update(ctx, key, value, last)
	if f := h.between; f != nil && err == nil {
		h.between = nil
		f()
		return 0, nats.ErrTimeout
	}
	return rev, err
}

// TestAttack39bUndoAckLostGivesBackOnce (session 39, red team b on
// quota39's give-back): a call's undo whose write lands but whose
// acknowledgement is lost retries on the value it then reads. When another
// call wrote in between (here B took a slot), that value is no longer the
// one the undo sent, so the retry gave the slot back a second time: B's
// slot went with it, and one call more than the burst was admitted at one
// instant. A's slot is on top (X, which takes the session's last unit
// between A's slot and A's increment, calls a tool the rate does not
// count) or below X's.
func TestAttack39bUndoAckLostGivesBackOnce(t *testing.T) {
	for _, tc := range []struct {
		name, x string // X's tool
	}{
		{"A's slot on top", "u"},
		{"A's slot below another", "t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{t: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
			hook, a, b := twoRouters(t, Config{Now: clk.Now, Policy: Policy{Rules: []Rule{
				{Name: "global", Tools: []string{"t"}, Rate: &Rate{Calls: 1, IntervalMS: 1000, Burst: 3}},
				{Name: "per-session", Per: []string{PerSession}, Budget: &Budget{Units: 1}},
			}}})
			admitted := 0
			check := func(l *Limiter, tool, session string) *Refusal {
				t.Helper()
				ref, err := l.Check(t.Context(), Call{Tool: tool, Session: session})
				if err != nil {
					t.Fatal(err)
				}
				if ref == nil && tool == "t" {
					admitted++
				}
				return ref
			}
			if check(b, "t", "y") != nil {
				t.Fatal("Y was refused")
			}
			rates := &ackLost{KeyValue: a.rates}
			a.rates = rates
			hook.before = func() { // A holds its slot; its increment is next
				if check(b, tc.x, "s") != nil {
					t.Error("X was refused")
				}
				rates.between = func() { // A's undo landed
					if check(b, "t", "b") != nil {
						t.Error("B was refused")
					}
				}
			}
			if ref := check(a, "t", "s"); ref == nil || ref.Kind != KindBudget {
				t.Fatalf("A: %+v, want a budget refusal", ref)
			}
			if rates.between != nil {
				t.Fatal("A's undo wrote nothing")
			}
			for i := range 3 {
				check(b, "t", "c"+string(rune('0'+i)))
			}
			if admitted != 3 {
				t.Fatalf("%d calls of the rate admitted at one instant under a burst of 3", admitted)
			}
		})
	}
}

// TestAttack39bGiveBackRetried: TestGiveBackNeverMore's model with each
// give-back's write retried later, after other takes and give-backs, as
// an undo does when its acknowledgement was lost (store.Update gives the
// value it then reads to the undo again, unless it is still the one it
// sent). Clocks are up to four emissions apart (routers' clocks differ,
// the value's run restarts). The rate is never below the one without the
// calls given back. Before, the retry gave the slot back again (run 8
// fails at step 14); with the give-back's own record alone, a retry after
// eight give-backs more still does in a burst (run 179: s.gave's guard).
func TestAttack39bGiveBackRetried(t *testing.T) {
	const em = 10 * time.Millisecond
	rng := rand.New(rand.NewPCG(39, 2))
	type taker struct {
		s     slot
		clock int64
		back  bool
	}
	for run := range 4000 {
		var g gcra
		var takers, retries []*taker
		clock, skew := int64(1e15), int64(em)*int64(run%5)
		atOnce := run%2 == 1 // a burst: every clock the same, retries late
		for step := range 80 {
			if !atOnce {
				clock += rng.Int64N(int64(em))
			}
			var open []*taker
			for _, tk := range takers {
				if !tk.back {
					open = append(open, tk)
				}
			}
			nonce := fmt.Sprint(run, ".", step)
			switch k := rng.IntN(6); {
			case k == 0 && len(retries) > 0 && (!atOnce || rng.IntN(8) == 0): // a lost acknowledgement's retry
				i := rng.IntN(len(retries))
				if ng, ok := giveBack(g, retries[i].s, em, nonce); ok {
					g, retries[i].s.gave = ng, ng.Given
				}
				retries = slices.Delete(retries, i, i+1)
			case k < 3 && len(open) > 0:
				tk := open[rng.IntN(len(open))]
				if ng, ok := giveBack(g, tk.s, em, nonce); ok {
					g, tk.s.gave = ng, ng.Given
				}
				tk.back = true
				if rng.IntN(2) == 0 {
					retries = append(retries, tk)
				}
			default:
				tk := &taker{clock: clock}
				if !atOnce {
					tk.clock += rng.Int64N(2*skew+1) - skew
				}
				g, tk.s = take(g, time.Unix(0, tk.clock), em, nonce)
				takers = append(takers, tk)
			}
			without := int64(0)
			for _, tk := range takers {
				if !tk.back {
					without = max(without, tk.clock) + int64(em)
				}
			}
			if low := clock - skew; max(g.TAT, low) < max(without, low) {
				t.Fatalf("run %d step %d: the rate's arrival time is %v before the one without the calls given back", run, step, time.Duration(without-g.TAT))
			}
		}
	}
}

// entry is a rates value as the bucket gives it.
type entry struct {
	jetstream.KeyValueEntry
	v []byte
}

func (e entry) Value() []byte { return e.v }

// FuzzRateValue (session 39, red team b): any bytes in a rate's value,
// as a router of any version, an operator or a bit flip could leave them,
// and any slot: decoding, taking and giving back never panic; a take
// moves the arrival time one emission past the value's (or the clock's);
// a give-back moves it down by at most one emission, never up, and
// leaves at most lastGiven give-backs however many it read; a value of
// another run, or none, gives back nothing.
func FuzzRateValue(f *testing.F) {
	for _, v := range []string{
		``, `{}`, `null`, `[]`, `{"tat":1765108800000000000,"n":"old"}`,
		`{"tat":1765108800030000000,"n":"b","r":"a","at":1765108800000000000,"k":3,"g":2,"b":20000000,"l":[[0,10000000],[2,10000000]]}`,
		`{"tat":-9223372036854775808,"r":"a","k":-1,"g":9223372036854775807,"b":-9223372036854775808,"l":[[1],[1,2,3],[],[-5,9223372036854775807]]}`,
		`{"tat":"x"}`, `{"l":[[0,1],[0,1],[0,1],[0,1],[0,1],[0,1],[0,1],[0,1],[0,1],[0,1],[0,1]],"r":"a"}`,
	} {
		f.Add([]byte(v), "a", "n", int64(1765108800010000000), int64(1), int64(0), int64(0), int64(0), int64(10_000_000), int64(1765108800000000000))
	}
	f.Fuzz(func(t *testing.T, v []byte, run, nonce string, from, place, given, back, gave, em, now int64) {
		if em <= 0 || time.Duration(em) > MaxRateSpan {
			return
		}
		g := rateValue(entry{v: v})
		if g.TAT < 1<<62 && now < 1<<62 { // a clock of this era, and a value a router wrote
			if tk, s := take(g, time.Unix(0, now), time.Duration(em), "t"); tk.TAT != max(g.TAT, now)+em || s.from != tk.TAT-em {
				t.Fatalf("take of %s at %d: %+v, slot %+v", v, now, tk, s)
			}
		}
		s := slot{run: run, nonce: nonce, from: from, place: place, given: given, back: back, gave: gave}
		out, ok := giveBack(g, s, time.Duration(em), "u")
		switch d := g.TAT - out.TAT; {
		case !ok && !reflect.DeepEqual(out, g):
			t.Fatalf("nothing given back, yet the value changed: %+v to %+v", g, out)
		case ok && (d <= 0 || d > em || len(out.Last) > lastGiven):
			t.Fatalf("given back %d of an emission of %d, %d last give-backs: %+v to %+v", d, em, len(out.Last), g, out)
		case ok && g.Run != run:
			t.Fatalf("run %q gave back on run %q", run, g.Run)
		}
	})
}

// TestAttack39bRefusedAfterTakingKeepTheRate (session 39, red team b:
// held): an agent's calls at once over three routers, each taking a
// global rate's slot and then refused by a second rate or a budget (as
// many give-backs as the race makes, far past lastGiven), on one frozen
// clock. No more calls run than the global burst, one per session, two
// per user; the global rate's value holds at least the calls that ran
// (a give-back never frees another's slot), and no more than the bound.
func TestAttack39bRefusedAfterTakingKeepTheRate(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
	const burst, users, sessions, each = 5, 4, 12, 5
	p := Policy{Rules: []Rule{
		{Name: "global", Rate: &Rate{Calls: 1, IntervalMS: 1000, Burst: burst}},
		{Name: "per-session", Per: []string{PerSession}, Rate: &Rate{Calls: 1, IntervalMS: 1000, Burst: 1}},
		{Name: "per-user", Per: []string{PerUser}, Budget: &Budget{Units: 2}},
	}}
	srv := testkit.RunServer(t)
	var routers [3]*Limiter
	for j := range routers {
		l, err := New(t.Context(), testkit.JetStream(t, testkit.Connect(t, srv)), bus.NewSubjects(bus.DefaultPrefix), Config{Policy: p, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		routers[j] = l
	}
	var mu sync.Mutex
	ran := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range sessions * each {
		c := Call{Tool: "t", User: fmt.Sprint("u", k%users), Session: fmt.Sprint("s", k%sessions)}
		wg.Go(func() {
			<-start
			ref, err := routers[k%3].Check(t.Context(), c)
			if err != nil {
				t.Error(err)
			}
			if ref == nil {
				mu.Lock()
				ran["all"]++
				ran[c.User]++
				ran[c.Session]++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	for k, n := range ran {
		if bound := map[bool]int{true: 2, false: 1}[k[0] == 'u']; k == "all" && n > burst || k != "all" && n > bound {
			t.Errorf("%s: %d calls ran", k, n)
		}
	}
	u, err := routers[0].Usage(t.Context(), Call{Tool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if u[0].Rule != "global" || u[0].Used < int64(ran["all"]) || u[0].Used > burst {
		t.Fatalf("the global rate holds %d slots, %d calls ran: %+v", u[0].Used, ran["all"], u[0])
	}
	t.Logf("%d calls ran, the global rate holds %d", ran["all"], u[0].Used)
}

// TestAttack39bMixedVersions (session 39, red team b: held): during an
// upgrade a 1.28 router writes a rate's value as {"tat","n"} only, both
// when it takes a slot and when it gives one back (one emission off any
// value), dropping 1.29's run fields. A 1.29 take over such a value keeps
// its arrival time and begins a run; a 1.29 give-back of a slot taken
// before a 1.28 write gives back nothing (the 1.28 write may have taken
// or freed anything), so a new router never frees an old router's slot.
func TestAttack39bMixedVersions(t *testing.T) {
	const em = 10 * time.Millisecond
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	n := now.UnixNano()
	old := func(g gcra, d time.Duration) []byte { // a 1.28 router's write: d on, or off
		b, _ := json.Marshal(map[string]any{"tat": max(g.TAT, n) + int64(d), "n": "old"})
		return b
	}
	a, sa := take(gcra{}, now, em, "a")
	b, sb := take(a, now, em, "b")
	for _, tc := range []struct {
		name string
		v    []byte
		s    slot
	}{
		{"a 1.28 take over A's, A gives back", old(a, em), sa},
		{"a 1.28 take over B's, A gives back", old(b, em), sa},
		{"a 1.28 give-back over B's, B gives back", old(b, -em), sb},
		{"a 1.28 give-back over B's, A gives back", old(b, -em), sa},
	} {
		g := rateValue(entry{v: tc.v})
		if out, ok := giveBack(g, tc.s, em, "u"); ok || out.TAT != g.TAT {
			t.Errorf("%s: given back %v", tc.name, time.Duration(g.TAT-out.TAT))
		}
		if tk, _ := take(g, now, em, "c"); tk.TAT != g.TAT+int64(em) || tk.Run != "c" {
			t.Errorf("%s: a 1.29 take over it: %+v", tc.name, tk)
		}
	}
}

// TestAttack39bCountsWrap (session 39, red team b: held): a run that never
// restarts (a rate kept busy) counts its give-backs on for good; its sum
// and count are compared by differences, so past int64's end they give
// back what they would have near zero.
func TestAttack39bCountsWrap(t *testing.T) {
	const em = 10 * time.Millisecond
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	tats := func(given, back int64) (out []int64) {
		g, _ := take(gcra{}, now, em, "r")
		g.Given, g.Back = given, back
		var ss []slot
		for i := range 10 {
			var s slot
			g, s = take(g, now, em, fmt.Sprint(i))
			ss = append(ss, s)
		}
		for _, i := range []int{3, 0, 9, 4, 5, 1, 2, 6, 7, 8} {
			g, _ = giveBack(g, ss[i], em, fmt.Sprint("u", i))
			out = append(out, g.TAT)
		}
		return out
	}
	if zero, wrapped := tats(0, 0), tats(math.MaxInt64-3, math.MaxInt64-int64(em)*2); !slices.Equal(zero, wrapped) {
		t.Fatalf("give-backs past the counts' wrap: %v, near zero %v", wrapped, zero)
	}
}

// TestGiveBackPastLastGiven (session 42, a flake of
// TestAttack38bConcurrentCallersKeepTheBound under load): a slot giving
// back after more give-backs than Last shows, all of slots above it,
// counted the unseen ones as below it and gave back nothing, keeping a
// whole slot of a call that never ran; the slots below it bound what
// they can have given back.
func TestGiveBackPastLastGiven(t *testing.T) {
	const em = time.Minute
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	g, _ := take(gcra{}, now, em, "r")
	start := g.TAT - int64(em) // the run's first slot is kept (admitted)
	var ss []slot
	for i := range 20 {
		var s slot
		g, s = take(g, now.Add(time.Duration(i)*time.Millisecond), em, fmt.Sprint(i))
		ss = append(ss, s)
	}
	// Places 1-4 are kept too; 6-20 give back, then 5, the last.
	for i := 19; i >= 5; i-- {
		var ok bool
		if g, ok = giveBack(g, ss[i], em, fmt.Sprint("u", i)); !ok {
			t.Fatalf("slot %d gave back nothing", i+1)
		}
	}
	g, ok := giveBack(g, ss[4], em, "u4")
	if !ok {
		t.Fatal("the slot given back after more than lastGiven others gave back nothing")
	}
	// Five slots kept. A slot that cannot tell whether the give-backs it
	// does not see were below it keeps the time the clocks passed in the
	// run (19 ms): here the two lowest given back (places 5 and 6).
	if held := time.Duration(g.TAT - start); held < 5*em || held > 5*em+2*19*time.Millisecond {
		t.Fatalf("five slots kept hold %v of the rate, want 5m and at most 38ms more (6m before)", held)
	}
}
