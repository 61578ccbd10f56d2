package limits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// publishHook is a JetStream whose next publish (a budget's increment)
// runs before (once set) ahead of it, and between (once set) after it
// lands, before its acknowledgement is read: another router's call on the
// same counter ahead of it, or in between.
type publishHook struct {
	jetstream.JetStream
	before, between func()
}

func (h *publishHook) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if f := h.before; f != nil {
		h.before = nil
		f()
	}
	ack, err := h.JetStream.PublishMsg(ctx, m, opts...)
	if f := h.between; f != nil {
		h.between = nil
		f()
	}
	return ack, err
}

// twoRouters are two Limiters of cfg on one server, a publishing through hook.
func twoRouters(t *testing.T, cfg Config) (hook *publishHook, a, b *Limiter) {
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	s := bus.NewSubjects(bus.DefaultPrefix)
	hook = &publishHook{JetStream: js}
	a, err := New(t.Context(), hook, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = New(t.Context(), js, s, cfg); err != nil {
		t.Fatal(err)
	}
	return hook, a, b
}

// TestAttack37bFullBudgetKeepsOthersCounts (session 37, red team b): past
// the quota state's soft bound a router that started a new budget counter
// purged it, and an increment another router (or a concurrent call of
// the same session) made on the same subject in between went with it: its
// call ran uncounted, so two calls at a time got one of each pair through
// a per-session budget for free while the state was full. Every admitted
// call stays counted.
func TestAttack37bFullBudgetKeepsOthersCounts(t *testing.T) {
	hook, a, b := twoRouters(t, Config{Policy: Policy{Rules: []Rule{{Name: "per-session", Per: []string{PerSession}, Budget: &Budget{Units: 2}}}, MaxBytes: 16 << 10}})
	for i := 0; ; i++ { // made-up sessions up to the bound
		ref, err := a.Check(t.Context(), Call{Tool: "t", Session: fmt.Sprintf("made-up-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if ref != nil && ref.Kind == KindFull {
			break
		}
		if i > 5000 {
			t.Fatal("no bound")
		}
	}
	admitted := 0
	other := func() {
		ref, err := b.Check(t.Context(), Call{Tool: "t", Session: "victim"})
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			admitted++
		}
	}
	hook.between = other
	ref, err := a.Check(t.Context(), Call{Tool: "t", Session: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	if ref == nil {
		admitted++
	}
	if hook.between != nil { // a started nothing
		hook.between = nil
		other()
	}
	used, _, err := a.counter(t.Context(), a.budgetSubject(a.key(&a.rules[0], Call{Session: "victim"}), a.now()))
	if err != nil {
		t.Fatal(err)
	}
	if used != int64(admitted) {
		t.Fatalf("%d calls admitted, %d counted: a refused router's purge erased another's count", admitted, used)
	}
}

// TestAttack37bFullStateKeepsHeldUsersAcrossMidnight (session 37, red team
// b): a budget counts per UTC day, so at midnight every user's count is
// new; with the quotas' state filled by made-up sessions the day before
// (their counters kept 48 h), every user a budget counts was refused
// (full) from midnight on, not only the new ones. A key counted the day
// before starts its new day's counter past the bound; a key never counted
// is still refused.
func TestAttack37bFullStateKeepsHeldUsersAcrossMidnight(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	now := time.Date(2026, 12, 7, 23, 0, 0, 0, time.UTC)
	l, err := New(t.Context(), js, bus.NewSubjects(bus.DefaultPrefix), Config{Now: func() time.Time { return now },
		Policy: Policy{Rules: []Rule{{Name: "per-user", Per: []string{PerUser}, Budget: &Budget{Units: 100}}}, MaxBytes: 16 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(user string) *Refusal {
		ref, err := l.Check(t.Context(), Call{Tool: "t", User: user})
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	if ref := check("alice"); ref != nil {
		t.Fatalf("alice's first call: %+v", ref)
	}
	// Up to the bound as read, not only as counted: the limiter counts a
	// new counter's bytes above what it takes, so a read of the stream
	// (every 100 ms while it refuses) would give room back.
	for i := 0; ; i++ {
		info, err := l.budgets.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Bytes+budgetBytes > 16<<10 {
			break
		}
		if i > 50_000 {
			t.Fatal("no bound")
		}
		check(fmt.Sprintf("made-up-%d", i))
	}
	now = now.Add(2 * time.Hour) // the next UTC day
	if ref := check("alice"); ref != nil {
		t.Fatalf("alice, counted yesterday, refused today: %+v", ref)
	}
	if ref := check("alice"); ref != nil {
		t.Fatalf("alice's second call today: %+v", ref)
	}
	if ref := check("mallory"); ref == nil || ref.Kind != KindFull {
		t.Fatalf("a user never counted, past the bound: %+v", ref)
	}
}
