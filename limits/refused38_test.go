package limits

import (
	"fmt"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// state is what the quota store holds: the rates bucket's keys, and the
// messages and last sequence (every write is one) of its stream and of
// the budgets stream.
type state struct {
	keys                 []string
	rateMsgs, rateSeq    uint64
	budgetMsgs, budgetSq uint64
	counters             uint64
}

func quotaState(t *testing.T, l *Limiter) state {
	t.Helper()
	var st state
	lister, err := l.rates.ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for k := range lister.Keys() {
		st.keys = append(st.keys, k)
	}
	slices.Sort(st.keys)
	ri, err := l.js.Stream(t.Context(), "KV_"+l.subj.Bucket(BucketRates))
	if err != nil {
		t.Fatal(err)
	}
	info, err := ri.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st.rateMsgs, st.rateSeq = info.State.Msgs, info.State.LastSeq
	if info, err = l.budgets.Info(t.Context()); err != nil {
		t.Fatal(err)
	}
	st.budgetMsgs, st.budgetSq, st.counters = info.State.Msgs, info.State.LastSeq, info.State.NumSubjects
	return st
}

// TestRefusedCallsChangeNothing (session 38): a call refused by a rate,
// a budget or the state's bound, by the rule that refuses it or after
// earlier rules admitted it, leaves the quota store as it found it: no
// new key, no new value, no counter made and taken back (protocol 3.3,
// "nothing was counted"). Before, a later rule's refusal rolled back an
// earlier rule's count by writing again (a rate value kept, or created,
// for a call that never ran; a counter incremented and decremented), and
// a budget's refusal wrote twice to its counter, or made one.
func TestRefusedCallsChangeNothing(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	perSession := func(name string) Rule { return Rule{Name: name, Per: []string{PerSession}} }
	rate := func(r Rule, calls int) Rule { r.Rate = &Rate{Calls: calls, IntervalMS: 60_000}; return r }
	budget := func(r Rule, units, cost int64) Rule { r.Budget = &Budget{Units: units, Cost: cost}; return r }
	global := Rule{Name: "global"}
	huge, n := 1_000_000, 0
	for _, tc := range []struct {
		name     string
		rules    []Rule
		maxBytes int64
		kind     string // of the refusal
	}{
		{"rate", []Rule{rate(global, 1)}, 0, KindRate},
		{"budget", []Rule{budget(global, 1, 1)}, 0, KindBudget},
		{"budget past on a new counter", []Rule{budget(perSession("s"), 1, 2)}, 0, KindBudget},
		{"rate and budget of one rule, budget refuses", []Rule{budget(rate(global, huge), 1, 1)}, 0, KindBudget},
		{"a new rate value, then a rate refuses", []Rule{rate(perSession("s"), huge), rate(global, 1)}, 0, KindRate},
		{"a new rate value, then a budget refuses", []Rule{rate(perSession("s"), huge), budget(global, 1, 1)}, 0, KindBudget},
		{"a new counter, then a rate refuses", []Rule{budget(perSession("s"), 10, 1), rate(global, 1)}, 0, KindRate},
		{"a new counter, then a budget refuses", []Rule{budget(perSession("s"), 10, 1), budget(global, 1, 1)}, 0, KindBudget},
		{"a held rate, then a full budget", []Rule{rate(global, huge), budget(perSession("s"), 10, 1)}, 1, KindFull},
		{"a held counter, then a full rate", []Rule{budget(global, 1<<40, 1), rate(perSession("s"), huge)}, 1, KindFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := testkit.JetStream(t, nc)
			s := bus.NewSubjects(fmt.Sprintf("q38x%d", n))
			n++
			limiter := func(maxBytes int64) *Limiter {
				l, err := New(t.Context(), js, s, Config{Policy: Policy{Rules: tc.rules, MaxBytes: maxBytes}})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			var l *Limiter
			call := func(session string) *Refusal {
				t.Helper()
				ref, err := l.Check(t.Context(), Call{Tool: "t", Session: session})
				if err != nil {
					t.Fatal(err)
				}
				return ref
			}
			// Session "first" is counted by a router with no bound; the
			// calls are then refused by one whose bound is tc.maxBytes.
			l = limiter(-1)
			call("first") // refused too where a call costs more than the budget
			l = limiter(tc.maxBytes)
			before := quotaState(t, l)
			for i := range 3 { // the same session again, and new ones
				for _, session := range []string{"first", fmt.Sprintf("new-%d", i)} {
					if tc.kind != KindFull || session != "first" {
						if ref := call(session); ref == nil || ref.Kind != tc.kind {
							t.Fatalf("session %s: %+v, want a %s refusal", session, ref, tc.kind)
						}
					}
				}
			}
			if after := quotaState(t, l); !equalState(before, after) {
				t.Fatalf("refused calls changed the quota store:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

func equalState(a, b state) bool {
	return slices.Equal(a.keys, b.keys) && a.rateMsgs == b.rateMsgs && a.rateSeq == b.rateSeq &&
		a.budgetMsgs == b.budgetMsgs && a.budgetSq == b.budgetSq && a.counters == b.counters
}

// TestRaceForTheLastUnitTakesBack (session 38): a call that every rule
// admits when it reads, but whose budget's last unit another router's
// call takes before its own increment, is refused and takes back all it
// counted: its increment, and the rate slot an earlier rule gave it. The
// other call keeps its count.
func TestRaceForTheLastUnitTakesBack(t *testing.T) {
	hook, a, b := twoRouters(t, Config{Policy: Policy{Rules: []Rule{
		{Name: "per-session", Per: []string{PerSession}, Rate: &Rate{Calls: 1, IntervalMS: 3_600_000}},
		{Name: "global", Budget: &Budget{Units: 1}},
	}}})
	hook.before = func() {
		if ref, err := b.Check(t.Context(), Call{Tool: "t", Session: "other"}); ref != nil || err != nil {
			t.Errorf("the other router's call: %+v %v", ref, err)
		}
	}
	if ref, err := a.Check(t.Context(), Call{Tool: "t", Session: "late"}); err != nil || ref == nil || ref.Kind != KindBudget {
		t.Fatalf("the call that lost the last unit: %+v %v", ref, err)
	}
	usage, err := a.Usage(t.Context(), Call{Tool: "t", Session: "late"})
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 2 || usage[0].Used != 0 || usage[1].Used != 1 {
		t.Fatalf("after the refusal: %+v, want the rate's slot back and the other call's unit counted", usage)
	}
}
