package session

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestForestall: a built-in call a cancel marked (1.32) has its writes
// refused ErrCancelled and changes nothing; another call's writes, and a
// write made for no call, go on; a mark past the dedupe window is dropped
// and refuses nothing; a session keeps the newest MaxCancelled marks.
func TestForestall(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	st, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects(""), store.Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(st.Sessions, Config{})
	ctx := t.Context()
	if err := s.Forestall(ctx, "s1", "r1", []string{"c2"}); err != nil {
		t.Fatal(err)
	}
	activate := func(ctx context.Context, g string) error {
		_, err := s.Update(ctx, "s1", func(sess *Session) error { sess.Active = append(sess.Active, g); return nil })
		return err
	}
	if err := activate(ForCall(ctx, "r1", "c2"), "ops"); !errors.Is(err, ErrCancelled) {
		t.Fatalf("the cancelled call's write: %v, want ErrCancelled", err)
	}
	for _, c := range []context.Context{ForCall(ctx, "r1", "c3"), ForCall(ctx, "r2", "c2"), ctx} {
		if err := activate(c, "web"); err != nil {
			t.Fatalf("another call's write: %v", err)
		}
	}
	sess, err := s.Load(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Active) != 3 || sess.Active[0] != "web" {
		t.Fatalf("active %v, want web three times and no ops", sess.Active)
	}
	// Past the dedupe window a copy runs anew (3.1): the mark goes.
	old := &Session{Cancelled: []Cancelled{{Call: "r1.c2", At: time.Now().Add(-bus.DefaultDedupeWindow - time.Second)}}}
	if err := old.screen(ForCall(ctx, "r1", "c2"), time.Now()); err != nil || len(old.Cancelled) != 0 {
		t.Fatalf("an expired mark: %v, kept %v", err, old.Cancelled)
	}
	// The bound: the oldest marks go.
	var ids []string
	for i := range MaxCancelled + 5 {
		ids = append(ids, fmt.Sprintf("k%d", i))
	}
	if err := s.Forestall(ctx, "s1", "r3", ids); err != nil {
		t.Fatal(err)
	}
	if sess, err = s.Load(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if n := len(sess.Cancelled); n != MaxCancelled || sess.Cancelled[n-1].Call != "r3.k68" || sess.Cancelled[0].Call != "r3.k5" {
		t.Fatalf("%d marks, from %+v to %+v", n, sess.Cancelled[0], sess.Cancelled[n-1])
	}
}

// BenchmarkForestallCost is what the 1.32 decision weighs (docs/router.md,
// "a cancelled built-in is forestalled in its session"): a reset_tools's
// session write with no marks and with a full list of them (its check costs
// no I/O), against the KV read of a call key that a ledger-kept mark would
// add to every built-in call.
func BenchmarkForestallCost(b *testing.B) {
	nc := testkit.Connect(b, testkit.RunServer(b))
	st, err := store.Setup(b.Context(), testkit.JetStream(b, nc), bus.NewSubjects(""), store.Config{Memory: true})
	if err != nil {
		b.Fatal(err)
	}
	s := NewStore(st.Sessions, Config{})
	ctx := b.Context()
	write := func(b *testing.B, id string) {
		call := ForCall(ctx, "turn-0123456789abcdef", "toolu_01ABCDEFGHIJKLMNOPQRSTUV")
		for b.Loop() {
			if _, err := s.Update(call, id, func(sess *Session) error { sess.Active = []string{"ops"}; return nil }); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("update, no marks", func(b *testing.B) { write(b, "s0") })
	var ids []string
	for i := range MaxCancelled {
		ids = append(ids, fmt.Sprintf("toolu_01ABCDEFGHIJKLMNOPQRS%03d", i))
	}
	if err := s.Forestall(ctx, "s64", "turn-0123456789abcdef", ids); err != nil {
		b.Fatal(err)
	}
	b.Run("update, 64 marks", func(b *testing.B) { write(b, "s64") })
	if _, err := st.Ledger.Put(ctx, "s0.turn-0123456789abcdef.toolu_01", []byte(`{"state":"done"}`)); err != nil {
		b.Fatal(err)
	}
	b.Run("ledger read (rejected)", func(b *testing.B) {
		for b.Loop() {
			if _, err := st.Ledger.Get(ctx, "s0.turn-0123456789abcdef.toolu_01"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
