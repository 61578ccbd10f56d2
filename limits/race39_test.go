package limits

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testkit"
)

// getHook is a rates bucket whose next read runs after (once set) once it
// is read: another router's call between a call's look and its count.
type getHook struct {
	jetstream.KeyValue
	after func()
}

func (h *getHook) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := h.KeyValue.Get(ctx, key)
	if f := h.after; f != nil {
		h.after = nil
		f()
	}
	return e, err
}

// TestCounterRefusesCompareAndSet (session 39): why a budget's loser
// cannot be refused by the server instead of taking its increment back.
// nats-server 2.15.3 refuses Nats-Incr with any Nats-Expected-* header
// (server/stream.go, jetstream_batching.go: JSMessageIncrInvalidError), and
// a counter stream refuses a message without Nats-Incr. Should a server
// allow it, this test says so, and the budget could be taken by a
// conditional increment.
func TestCounterRefusesCompareAndSet(t *testing.T) {
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "C", Subjects: []string{"c.>"}, AllowMsgCounter: true}); err != nil {
		t.Fatal(err)
	}
	incr := func(h ...string) error {
		m := nats.NewMsg("c.key")
		m.Header.Set("Nats-Incr", "+1")
		for i := 0; i < len(h); i += 2 {
			m.Header.Set(h[i], h[i+1])
		}
		_, err := js.PublishMsg(t.Context(), m)
		return err
	}
	if err := incr(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Nats-Expected-Last-Subject-Sequence", "Nats-Expected-Last-Sequence"} {
		if err := incr(h, "1"); err == nil {
			t.Fatalf("the server took Nats-Incr with %s: a budget can be taken by compare-and-set", h)
		}
	}
}

// TestRace39BudgetTakenBackOnlyForABudget (session 39, quota39): a call
// whose budget increment another rule then refuses held a unit it took
// back, and a call that read or incremented the counter meanwhile was
// refused although the budget admitted it (the first never ran). Check
// now takes every rate's slot first and the budgets last, so a call's
// budget units are taken back only when another budget of the call is
// over: with one budget rule, never. Here call A's rate slot is taken
// between its read and its write (another call of its session, a tool the
// budget does not count); before, A incremented the budget, call B of
// another session came in that window and was refused, and A took back.
func TestRace39BudgetTakenBackOnlyForABudget(t *testing.T) {
	hook, a, b := twoRouters(t, Config{Policy: Policy{Rules: []Rule{
		{Name: "paid", Tools: []string{"t"}, Budget: &Budget{Units: 1}},
		{Name: "per-session", Per: []string{PerSession}, Rate: &Rate{Calls: 1, IntervalMS: 3_600_000}},
	}}})
	other := func(tool, session string) *Refusal {
		ref, err := b.Check(t.Context(), Call{Tool: tool, Session: session})
		if err != nil {
			t.Error(err)
		}
		return ref
	}
	a.rates = &getHook{KeyValue: a.rates, after: func() {
		if ref := other("u", "s1"); ref != nil {
			t.Errorf("s1's call of another tool: %+v", ref)
		}
	}}
	var late *Refusal
	hook.between = func() { late = other("t", "s2") }
	ref, err := a.Check(t.Context(), Call{Tool: "t", Session: "s1"})
	if err != nil || ref == nil || ref.Kind != KindRate {
		t.Fatalf("the call whose slot was taken: %+v %v, want a rate refusal", ref, err)
	}
	if hook.between != nil { // A incremented nothing
		hook.between = nil
		late = other("t", "s2")
	}
	if late != nil {
		t.Fatalf("s2's call was refused by a unit s1's call held and then took back: %+v", late)
	}
	u, err := a.Usage(t.Context(), Call{Tool: "t", Session: "s2"})
	if err != nil || len(u) != 2 || u[0].Used != 1 {
		t.Fatalf("usage: %+v %v, want s2's unit counted", u, err)
	}
}

// TestRace39RateUndoExact (session 39, quota39): a call that took a rate's
// slot and is then refused by its budget gives the slot back only if it is
// still in the rate's value. Before, the undo took one emission off
// whatever value was there: when the call's slot had passed and another
// call took a slot from now (the value restarted at now), the undo gave
// that call's slot away, and a third call at the same instant was admitted
// past the rate (two calls at once under a burst of 1). A rate's value now
// names its chain (the writer that restarted it at its now); an undo takes
// its emission off only on its own chain.
func TestRace39RateUndoExact(t *testing.T) {
	for _, tc := range []struct {
		name    string
		burst   int
		advance time.Duration // the clock, between A's slot and B's
		admit   int           // calls admitted at B's instant after A's undo
	}{
		{"the slot passed, another call restarted the rate", 1, 2 * time.Second, 0},
		{"another call's slot after it, on its chain", 2, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{t: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
			hook, a, b := twoRouters(t, Config{Now: clk.Now, Policy: Policy{Rules: []Rule{
				{Name: "global", Rate: &Rate{Calls: 1, IntervalMS: 1000, Burst: tc.burst}},
				{Name: "per-session", Per: []string{PerSession}, Budget: &Budget{Units: 1}},
			}}})
			hook.before = func() { // A holds its slot; its increment is next
				clk.Set(clk.Now().Add(tc.advance))
				if ref, err := b.Check(t.Context(), Call{Tool: "t", Session: "s"}); ref != nil || err != nil {
					t.Errorf("B: %+v %v", ref, err)
				}
			}
			if ref, err := a.Check(t.Context(), Call{Tool: "t", Session: "s"}); err != nil || ref == nil || ref.Kind != KindBudget {
				t.Fatalf("A: %+v %v, want a budget refusal", ref, err)
			}
			for i := range tc.admit + 1 {
				ref, err := b.Check(t.Context(), Call{Tool: "t", Session: "c" + string(rune('0'+i))})
				if err != nil {
					t.Fatal(err)
				}
				if admitted := ref == nil; admitted != (i < tc.admit) {
					t.Fatalf("call %d after A's undo: %+v; want %d admitted (burst %d, B holds one)", i, ref, tc.admit, tc.burst)
				}
			}
		})
	}
}

// TestGiveBackNeverMore (session 39, quota39): random runs of slots taken
// and given back on one clock (a taker's clock read up to 3 ms before its
// write lands, so clocks land out of order), against the rate without the
// calls that gave theirs back: after every step the value is never below
// it (the rate admits no call more), and a call giving back over its own
// write restores the value it wrote over. Calls all at one instant (a
// burst, as in TestAttack38bConcurrentCallersKeepTheBound), up to
// lastGiven give-backs, give back exactly. Before, a give-back took an
// emission off any value: the first run fails at its 8th step; without
// the last give-backs (all given back since counted below), a burst keeps
// a whole slot too many.
func TestGiveBackNeverMore(t *testing.T) {
	const em = 10 * time.Millisecond
	rng := rand.New(rand.NewPCG(39, 39))
	type taker struct {
		s      slot
		clock  int64
		before gcra
		back   bool
	}
	for run := range 4000 {
		atOnce := run%2 == 1 // every clock the same
		var g gcra
		var takers []*taker
		clock, given := int64(1e15), 0
		for step := range 40 {
			var stale int64
			if !atOnce {
				clock += rng.Int64N(int64(em) / 2)
				stale = rng.Int64N(3e6)
			}
			var open []*taker
			for _, tk := range takers {
				if !tk.back {
					open = append(open, tk)
				}
			}
			nonce := fmt.Sprint(run, ".", step)
			if len(open) == 0 || rng.IntN(3) > 0 || atOnce && given == lastGiven {
				tk := &taker{clock: clock - stale, before: g}
				g, tk.s = take(g, time.Unix(0, tk.clock), em, nonce)
				takers = append(takers, tk)
			} else {
				tk := open[rng.IntN(len(open))]
				own := g.Nonce == tk.s.nonce
				g, _ = giveBack(g, tk.s, em, nonce)
				tk.back, given = true, given+1
				if own && max(g.TAT, clock) != max(tk.before.TAT, clock) {
					t.Fatalf("run %d step %d: given back over its own write: %d, wrote over %d", run, step, g.TAT, tk.before.TAT)
				}
			}
			without := int64(0) // the takes of the calls that ran, in order, each on its clock
			for _, tk := range takers {
				if !tk.back {
					without = max(without, tk.clock) + int64(em)
				}
			}
			switch got, want := max(g.TAT, clock), max(without, clock); {
			case got < want:
				t.Fatalf("run %d step %d: the rate's arrival time is %v before the one without the calls given back", run, step, time.Duration(want-got))
			case atOnce && got != want:
				t.Fatalf("run %d step %d, at once: the rate's arrival time is %v after the one without the calls given back", run, step, time.Duration(got-want))
			}
		}
	}
}
