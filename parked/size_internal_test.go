package parked

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
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

// TestContinuationRoom: a continuation of its own holds a waiting call's
// input of heldFrom bytes or more by its digest only, its record holding
// the input (1.20), and leaves AnswerRoom of the max payload for the
// results that join it, as a record does: at that bound the run parks; a
// byte past it, new or re-parked, its calls fail ErrTooLarge and nothing is
// written. A re-sent copy is compared with a held input by its digest.
func TestContinuationRoom(t *testing.T) {
	big := json.RawMessage(`{"x":"` + strings.Repeat("b", heldFrom-8) + `"}`) // heldFrom bytes: held
	under := json.RawMessage(`{"x":"` + strings.Repeat("u", heldFrom-9) + `"}`)
	queued := json.RawMessage(`{"x":"` + strings.Repeat("q", 4<<10) + `"}`) // not waiting: kept
	synctest.Test(t, func(t *testing.T) {
		kv := newMemKV()
		var max int64 = 1 << 30
		s := New(&store.Store{Parked: &store.KV{KeyValue: kv}}, subj, Config{TTL: ttl, Owner: "router-a", Source: source,
			MaxPayload: func() int64 { return max }})
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		testkit.Stop(t, s.Stop)
		// run parks c0 and c1 (ins) of a batch whose call c2 is queued behind them.
		run := func(reply string, alone bool, ins ...json.RawMessage) Run {
			b := &Batch{Session: "s1", ReplyID: reply}
			var recs []*Record
			for i, in := range ins {
				r := record("s1", reply, "c"+strconv.Itoa(i))
				r.Call.Input = in
				recs, b.Data.Calls = append(recs, r), append(b.Data.Calls, r.Call)
			}
			b.Data.Calls = append(b.Data.Calls, bus.Call{ID: "c2", Name: "deploy", Input: queued})
			return Run{Batch: b, Calls: recs, Results: map[string]bus.Result{}, Next: len(ins), Alone: alone}
		}
		stored := func(reply string) []byte {
			e, err := kv.Get(t.Context(), "s1."+reply)
			if err != nil {
				t.Fatal(err)
			}
			return e.Value()
		}
		if _, err := s.Park(t.Context(), run("r0", true, under, big)); err != nil {
			t.Fatal(err)
		}
		v := stored("r0")
		if bytes.Contains(v, big) || !bytes.Contains(v, under) || !bytes.Contains(v, queued) || !bytes.Contains(v, []byte(`"held":{"c1":"`)) {
			t.Fatalf("held: only c1's input of %d bytes, by its digest: %.400s", heldFrom, v)
		}
		if _, err := s.Park(t.Context(), run("r1", true, big, big)); err != nil {
			t.Fatal(err)
		}
		size := int64(len(stored("r1"))) // the size of r2..r5's continuations too
		for i, tc := range []struct {
			name  string
			max   int64
			alone bool // false: c0 parked running, then c0 and c1 re-parked (the update)
			parks bool
		}{
			{"at the bound", size + AnswerRoom, true, true},
			{"a byte past it", size + AnswerRoom - 1, true, false},
			{"re-parked at the bound", size + AnswerRoom, false, true},
			{"re-parked a byte past it", size + AnswerRoom - 1, false, false},
		} {
			reply := "r" + strconv.Itoa(2+i)
			r := run(reply, true, big, big)
			if !tc.alone {
				max = 1 << 30
				first := run(reply, false, big, big)
				first.Calls = first.Calls[:1] // c1's input is held from the re-park on
				got, err := s.Park(t.Context(), first)
				if err != nil || got.Batch.Phase != PhaseRunning {
					t.Fatalf("%s: the first park: %+v %v", tc.name, got, err)
				}
				r.Batch = got.Batch
			}
			max = tc.max
			writes := kv.writes
			got, err := s.Park(t.Context(), r)
			if tc.parks != (err == nil) || tc.parks && (len(got.Parked) != 2 || int64(len(stored(reply))) != size) {
				t.Fatalf("%s (%d bytes, max %d): parked %v, %+v %v", tc.name, size, tc.max, tc.parks, got, err)
			}
			if !tc.parks && (!errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "the batch's continuation would be") || kv.writes != writes) {
				t.Fatalf("%s: %v, %d writes", tc.name, err, kv.writes-writes)
			}
		}
		max = 1 << 30
		// A re-sent copy of r1: the same calls, a held input written otherwise, or another input.
		same := json.RawMessage(`{ "x" : "` + strings.Repeat("b", heldFrom-8) + `" }`)
		other := json.RawMessage(`{"x":"` + strings.Repeat("o", heldFrom-8) + `"}`)
		for _, c := range []struct {
			in      json.RawMessage
			differs bool
		}{{big, false}, {same, false}, {other, true}, {nil, true}} {
			got, err := s.Park(t.Context(), run("r1", true, big, c.in))
			if err != nil || !got.Before || (got.Differs != nil) != c.differs {
				t.Fatalf("a copy with c1's input %.20s: %+v %v", c.in, got, err)
			}
		}
	})
}
