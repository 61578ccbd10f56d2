package limits

import (
	"context"
	"testing"

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
