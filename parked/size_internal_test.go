package parked

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestCarriedInputOnce: a record that carries its batch holds its call's
// input once (1.19): the carried batch leaves it out, a read puts it back,
// and a re-sent copy is compared with it as before.
func TestCarriedInputOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t)
		key := m.park(t, "r1", bus.KindExternal, true, "c1").Parked[0].Key()
		e, err := m.kv.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(e.Value(), []byte(`{"env":"prod"}`)); n != 1 {
			t.Fatalf("the record holds the input %d times: %s", n, e.Value())
		}
		rec, _ := m.b.Read.Get(t.Context(), key)
		cont, err := m.b.Read.Continuation(t.Context(), rec)
		if err != nil || string(cont.Data.Calls[0].Input) != `{"env":"prod"}` {
			t.Fatalf("the carried batch read back: %+v %v", cont, err)
		}
		if again := m.park(t, "r1", bus.KindExternal, true, "c1"); !again.Before || again.Differs != nil {
			t.Fatalf("a same copy: %+v", again)
		}
		other := record("s1", "r1", "c1")
		other.Call.Input = json.RawMessage(`{"env":"dev"}`)
		b := &Batch{Session: "s1", ReplyID: "r1", Data: bus.Batch{Calls: []bus.Call{other.Call}}}
		got, err := m.a.Park(t.Context(), Run{Batch: b, Calls: []*Record{other}, Results: map[string]bus.Result{}, Next: 1, Alone: true})
		if err != nil || got.Differs == nil {
			t.Fatalf("a copy with another input: %+v %v", got, err)
		}
	})
}

// TestParkTooLarge: a record that would leave less than AnswerRoom of the
// max payload does not park (ErrTooLarge) and nothing of it is written; a
// batch with a continuation gets that call's failure and runs on.
func TestParkTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := newMemKV()
		s := New(&store.Store{Parked: &store.KV{KeyValue: kv}}, subj, Config{TTL: ttl, Owner: "router-a", Source: source,
			MaxPayload: func() int64 { return AnswerRoom + 1024 }})
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		testkit.Stop(t, s.Stop)
		big := record("s1", "r1", "c1")
		big.Call.Input = json.RawMessage(`{"x":"` + strings.Repeat("x", 1024) + `"}`)
		b := &Batch{Session: "s1", ReplyID: "r1", Data: bus.Batch{Calls: []bus.Call{big.Call}}}
		_, err := s.Park(t.Context(), Run{Batch: b, Calls: []*Record{big}, Results: map[string]bus.Result{}, Next: 1, Alone: true})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "its record would be") || kv.writes != 0 {
			t.Fatalf("carried: %v, %d writes", err, kv.writes)
		}
		small, big := record("s1", "r2", "c0"), record("s1", "r2", "c1")
		big.Call.Input = json.RawMessage(`{"x":"` + strings.Repeat("x", 1024) + `"}`)
		b = &Batch{Session: "s1", ReplyID: "r2", Data: bus.Batch{Calls: []bus.Call{small.Call, big.Call}}}
		got, err := s.Park(t.Context(), Run{Batch: b, Calls: []*Record{small, big}, Results: map[string]bus.Result{}, Next: 2, Alone: true})
		if err != nil || len(got.Parked) != 1 || !errors.Is(got.Failed["c1"], ErrTooLarge) {
			t.Fatalf("with a continuation: %+v %v", got, err)
		}
		// c1 is awaited in vain: the run goes back to running, its router finishes it.
		if got.Batch.Phase != PhaseRunning || got.Batch.Owner != "router-a" {
			t.Fatalf("the continuation is %s, owned by %q", got.Batch.Phase, got.Batch.Owner)
		}
		if _, err := s.Read.Get(t.Context(), big.Key()); !store.IsNotFound(err) {
			t.Fatalf("the refused record: %v", err)
		}
	})
}

// TestTaken: an answer to a call of a batch with a continuation of its own
// leaves it its size and the other missing results' shares of the rest;
// a carried batch leaves nothing (its record is the continuation).
func TestTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := newMemKV()
		const max = 1 << 20
		s := New(&store.Store{Parked: &store.KV{KeyValue: kv}}, subj, Config{TTL: ttl, Owner: "router-a", Source: source,
			MaxPayload: func() int64 { return max }})
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		testkit.Stop(t, s.Stop)
		recs := []*Record{record("s1", "r1", "c0"), record("s1", "r1", "c1"), record("s1", "r1", "c2")}
		b := &Batch{Session: "s1", ReplyID: "r1", Data: bus.Batch{Calls: []bus.Call{recs[0].Call, recs[1].Call, recs[2].Call}}}
		if _, err := s.Park(t.Context(), Run{Batch: b, Calls: recs, Results: map[string]bus.Result{}, Next: 3, Alone: true}); err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(t.Context(), "s1.r1")
		if err != nil {
			t.Fatal(err)
		}
		size := len(e.Value())
		left := max - AnswerRoom - size
		if got, want := s.Read.Taken("s1", "r1"), size+left-left/3; got != want {
			t.Fatalf("Taken = %d, want %d (size %d, three waits)", got, want, size)
		}
		carried := record("s1", "r2", "c0")
		b = &Batch{Session: "s1", ReplyID: "r2", Data: bus.Batch{Calls: []bus.Call{carried.Call}}}
		if _, err := s.Park(t.Context(), Run{Batch: b, Calls: []*Record{carried}, Results: map[string]bus.Result{}, Next: 1, Alone: true}); err != nil {
			t.Fatal(err)
		}
		if got := s.Read.Taken("s1", "r2"); got != 0 {
			t.Fatalf("Taken of a carried batch = %d", got)
		}
	})
}
