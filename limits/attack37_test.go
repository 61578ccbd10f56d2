package limits

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack37QuotaStateBounded (session 37, red team): the shared agent
// (or any agent of an open router) calls in sessions it makes up, each
// counted under a key of its own by a per-session rule: a rate's value in
// P_limits for 24 h, a budget's counter in P_LIMITS for 48 h, about 345
// bytes a call with no bound. Past the soft bound a new key is refused
// (limit_exceeded, nothing kept); the keys held still count, and a budget
// still refuses past its units.
func TestAttack37QuotaStateBounded(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	const soft = 64 << 10
	for _, tc := range []struct {
		name string
		rule Rule
	}{
		{"rate and budget", Rule{Name: "per-session", Per: []string{PerSession}, Rate: &Rate{Calls: 10, IntervalMS: 60_000}, Budget: &Budget{Units: 2}}},
		{"budget", Rule{Name: "budget-only", Per: []string{PerSession}, Budget: &Budget{Units: 2}}},
		{"rate", Rule{Name: "rate-only", Per: []string{PerSession}, Rate: &Rate{Calls: 10, IntervalMS: 60_000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := testkit.JetStream(t, nc)
			s := bus.NewSubjects(bus.DefaultPrefix)
			l, err := New(t.Context(), js, s, Config{Policy: Policy{Rules: []Rule{tc.rule}, MaxBytes: soft}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = js.DeleteKeyValue(context.Background(), s.Bucket(BucketRates))
				_ = js.DeleteStream(context.Background(), s.Stream(StreamBudgets))
			})
			call := func(session string) (*Refusal, error) {
				return l.Check(t.Context(), Call{Tool: "t", Session: session})
			}
			if ref, err := call("held"); ref != nil || err != nil {
				t.Fatalf("first call: %+v %v", ref, err)
			}
			admitted, refused := 1, 0 // "held" first
			for i := range 2000 {     // 690 KB of quota state without a bound
				ref, err := call(fmt.Sprintf("made-up-%d", i))
				switch {
				case err != nil:
					t.Fatal(err)
				case ref == nil:
					admitted++
				case ref.Kind != KindFull:
					t.Fatalf("refused as %+v", ref)
				default:
					refused++
				}
			}
			if refused == 0 {
				t.Fatal("2,000 made-up sessions each kept a quota count: no bound")
			}
			st, err := l.rates.Status(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			info, err := l.budgets.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if st.Bytes() > soft || info.State.Bytes > soft {
				t.Fatalf("rates of %d bytes, budgets of %d: past the bound %d (%d sessions admitted)", st.Bytes(), info.State.Bytes, soft, admitted)
			}
			if tc.rule.Budget != nil && info.State.NumSubjects != uint64(admitted) {
				t.Fatalf("%d budget counters kept for %d sessions admitted: a refused one's kept", info.State.NumSubjects, admitted)
			}
			// The held session still counts, and its budget still ends.
			if ref, err := call("held"); ref != nil || err != nil {
				t.Fatalf("held session's second call: %+v %v", ref, err)
			}
			if ref, err := call("held"); tc.rule.Budget != nil && (ref == nil || ref.Kind != KindBudget || err != nil) {
				t.Fatalf("held session past its budget: %+v %v", ref, err)
			}
		})
	}
}
