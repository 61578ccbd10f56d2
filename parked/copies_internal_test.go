package parked

import (
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// TestFirstCopyMeetsAnsweredRecords: two copies of a batch (docs/protocol.md
// 3.1, 6.1 "a copy lists written records"). The first writes its
// continuation and stalls before its records; the second adopts that
// continuation, writes the records and lists them; its handler answers them
// at once. When the first goes on, its creates conflict with records that
// are no longer parked: they are the same calls, parked by the other copy
// and answered since, so it counts them parked and writes nothing. It used
// to read them as calls a cancel ended before they parked (Forestall) and
// to put the continuation back to running, which fails with "key not
// found" once the last answer removed it, and every call of the first
// copy ended internal (TestCopiesListOnlyWrittenRecords, under load).
func TestFirstCopyMeetsAnsweredRecords(t *testing.T) {
	run := func(reply string) Run {
		b := &Batch{Session: "s1", ReplyID: reply}
		var recs []*Record
		for _, id := range []string{"c1", "c2"} {
			r := record("s1", reply, id)
			recs = append(recs, r)
			b.Data.Calls = append(b.Data.Calls, r.Call)
		}
		return Run{Batch: b, Calls: recs, Results: map[string]bus.Result{}, Next: 2, Alone: true}
	}
	states := func(recs []*Record) (out []string) {
		for _, r := range recs {
			out = append(out, r.Call.ID+":"+string(r.Status))
		}
		return out
	}
	// copies parks the first copy's continuation, then the second copy
	// whole, then answers (through the second's router) the calls named.
	copies := func(t *testing.T, m *machine, reply string, answer ...string) Run {
		t.Helper()
		first := run(reply)
		if err := m.a.conts.parkBatch(t.Context(), first.Batch, first.Results, []string{"c1", "c2"}, first.Next, first.Alone); err != nil {
			t.Fatal(err)
		}
		got, err := m.b.Park(t.Context(), run(reply))
		if err != nil || !got.Before || !slices.Equal(states(got.Parked), []string{"c1:parked", "c2:parked"}) {
			t.Fatalf("second copy: %+v, %v", got, err)
		}
		for _, id := range answer {
			rec := answerDone(t, m.b, bus.CallKey("s1", reply, id))
			cont, resume, err := m.b.Resume(t.Context(), rec, *rec.Result, func(*Batch) {})
			if err != nil {
				t.Fatalf("resume %s: %v", id, err)
			}
			if resume { // its batch.done went out: the router finishes it (protocol 1.13)
				if err := m.b.Finish(t.Context(), cont); err != nil {
					t.Fatal(err)
				}
			}
		}
		return first
	}
	t.Run("every call answered, the continuation gone", func(t *testing.T) {
		m := newMachine(t)
		first := copies(t, m, "r1", "c1", "c2")
		if _, err := m.a.Read.Batch(t.Context(), "s1", "r1"); !store.IsNotFound(err) {
			t.Fatalf("the finished batch left the continuation: %v", err)
		}
		out, err := m.a.parkCalls(t.Context(), first)
		if err != nil || len(out.Failed) != 0 || !slices.Equal(states(out.Parked), []string{"c1:done", "c2:done"}) {
			t.Fatalf("first copy: %+v, %v; want both calls counted parked", out, err)
		}
	})
	t.Run("one call answered, the batch still waits", func(t *testing.T) {
		m := newMachine(t)
		first := copies(t, m, "r2", "c1")
		out, err := m.a.parkCalls(t.Context(), first)
		if err != nil || len(out.Failed) != 0 || !slices.Equal(states(out.Parked), []string{"c1:done", "c2:parked"}) {
			t.Fatalf("first copy: %+v, %v; want both calls counted parked", out, err)
		}
		b, err := m.a.Read.Batch(t.Context(), "s1", "r2")
		if err != nil || b.Phase != PhaseParked || b.Owner != "" || b.Results["c1"].ID != "c1" {
			t.Fatalf("continuation after the first copy: %+v, %v; want parked with c1's result", b, err)
		}
		// The last answer resumes it as usual.
		rec := answerDone(t, m.a, bus.CallKey("s1", "r2", "c2"))
		if _, resume, err := m.a.Resume(t.Context(), rec, *rec.Result, func(*Batch) {}); err != nil || !resume {
			t.Fatalf("last answer: resume %v, %v", resume, err)
		}
	})
	t.Run("a call a cancel ended before it parked still settles", func(t *testing.T) {
		m := newMachine(t)
		first := run("r3")
		if err := m.a.conts.parkBatch(t.Context(), first.Batch, first.Results, []string{"c1", "c2"}, first.Next, first.Alone); err != nil {
			t.Fatal(err)
		}
		if err := m.b.Cancels.Forestall(t.Context(), "s1", "r3", first.Calls[1].Call, bus.ErrorResult(first.Calls[1].Call, bus.CodeInterrupted, bus.InterruptedText)); err != nil {
			t.Fatal(err)
		}
		out, err := m.a.parkCalls(t.Context(), first)
		if err != nil || out.Failed["c2"] == nil || len(out.Failed) != 1 || !slices.Equal(states(out.Parked), []string{"c1:parked"}) {
			t.Fatalf("first copy: %+v, %v; want c1 parked, c2 failed", out, err)
		}
	})
}
