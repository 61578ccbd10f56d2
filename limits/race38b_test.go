package limits

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack38bConcurrentCallersKeepTheBound (session 38, red team): Check
// reads every rule's count before it counts, so calls that arrive together
// all read the same room. 48 calls at once, of one session, of one user in
// many sessions, or of many sessions under a global rule, split over two
// routers, are admitted no more than the rule's bound: a rate's write is a
// compare-and-set on the revision read (the loser reads again and may be
// refused), a budget's increment returns a unique total (past the units it
// is taken back). The counts kept are the admitted calls' alone. Before
// loose38 (the count first) it held alike. A rate admitted fewer, 4 of 5 in
// 10 of 70 runs (1 of 10 before loose38): a call judged the value on its
// clock read before another wrote it; it now reads its clock after.
func TestAttack38bConcurrentCallersKeepTheBound(t *testing.T) {
	srv := testkit.RunServer(t)
	const n, bound = 48, 5
	for i, tc := range []struct {
		name  string
		rule  Rule
		call  func(i int) Call
		after *Rule // a second rule, checked after
	}{
		{"budget, one session", Rule{Name: "b", Per: []string{PerSession}, Budget: &Budget{Units: bound}},
			func(int) Call { return Call{Tool: "t", Session: "s"} }, nil},
		{"budget, one user", Rule{Name: "b", Per: []string{PerUser}, Budget: &Budget{Units: bound}},
			func(i int) Call { return Call{Tool: "t", User: "u", Session: fmt.Sprint("s", i)} }, nil},
		{"budget, global", Rule{Name: "b", Budget: &Budget{Units: bound}},
			func(i int) Call { return Call{Tool: "t", Session: fmt.Sprint("s", i)} }, nil},
		{"rate, one session", Rule{Name: "r", Per: []string{PerSession}, Rate: &Rate{Calls: bound, IntervalMS: 3_600_000}},
			func(int) Call { return Call{Tool: "t", Session: "s"} }, nil},
		{"rate, global", Rule{Name: "r", Rate: &Rate{Calls: bound, IntervalMS: 3_600_000}},
			func(i int) Call { return Call{Tool: "t", Session: fmt.Sprint("s", i)} }, nil},
		{"a global rate, then a smaller global budget", Rule{Name: "r", Rate: &Rate{Calls: 2 * bound, IntervalMS: 3_600_000}},
			func(i int) Call { return Call{Tool: "t", Session: fmt.Sprint("s", i)} }, &Rule{Name: "b", Budget: &Budget{Units: bound}}},
		{"a per-session budget, then a global rate", Rule{Name: "b", Per: []string{PerSession}, Budget: &Budget{Units: 2 * bound}},
			func(int) Call { return Call{Tool: "t", Session: "s"} }, &Rule{Name: "r", Rate: &Rate{Calls: bound, IntervalMS: 3_600_000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Rules: []Rule{tc.rule}}
			if tc.after != nil {
				p.Rules = append(p.Rules, *tc.after)
			}
			var routers [2]*Limiter
			for j := range routers {
				l, err := New(t.Context(), testkit.JetStream(t, testkit.Connect(t, srv)), bus.NewSubjects(fmt.Sprint("q38b", i)), Config{Policy: p})
				if err != nil {
					t.Fatal(err)
				}
				routers[j] = l
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for k := range n {
				wg.Go(func() {
					<-start
					ref, err := routers[k%2].Check(t.Context(), tc.call(k))
					if err != nil {
						t.Error(err)
					}
					if ref == nil {
						admitted.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			// Exactly the bound: a rate judged on a clock read before
			// another call's value was written refused a call or two
			// (its arrival time ahead of that now by their reads' gap).
			got := admitted.Load()
			t.Logf("%d of %d calls at once admitted (bound %d)", got, n, bound)
			if got != bound {
				t.Fatalf("%d of %d calls at once admitted, the bound is %d", got, n, bound)
			}
			// Every rule counts the admitted calls alone: a call a later
			// rule refused took back what an earlier one counted.
			u, err := routers[0].Usage(t.Context(), tc.call(0))
			if err != nil || len(u) != len(p.Rules) {
				t.Fatalf("usage after the race: %+v %v", u, err)
			}
			for _, u := range u {
				if u.Used != got {
					t.Fatalf("usage after the race: %+v, want the %d admitted", u, got)
				}
			}
		})
	}
}
