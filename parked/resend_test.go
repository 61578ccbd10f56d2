package parked

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// A copy of a batch with other calls than the batch parked under its reply
// id (docs/protocol.md 3.1, 1.12) is told so where it parks, whichever way
// the first copy holds its batch, and writes nothing that stays: no record
// of its own calls, no continuation.
func TestCopyWithOtherCalls(t *testing.T) {
	st := newStore(t)
	first, _ := startLive(t, st, "router-a")
	second, secondLive := startLive(t, st, "router-b")
	run := func(reply string, waiting []string, calls ...string) Run {
		b := newBatch("s1", reply)
		b.Data.Calls = nil
		for _, id := range calls {
			b.Data.Calls = append(b.Data.Calls, record("s1", reply, id).Call)
		}
		r := Run{Batch: b, Results: map[string]bus.Result{}, Next: len(calls), Alone: true}
		for _, id := range waiting {
			r.Calls = append(r.Calls, record("s1", reply, id))
		}
		return r
	}
	absent := func(reply string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, err := second.Read.Get(t.Context(), bus.CallKey("s1", reply, id)); !store.IsNotFound(err) {
				t.Fatalf("%s/%s: a refused copy left a record: %v", reply, id, err)
			}
		}
	}
	for _, tc := range []struct {
		name          string
		first, second Run
		want          string
		gone          []string // calls of the copy with no record
		keep          bool     // the first's continuation stays under the batch's key
	}{
		// The first has a continuation of its own: the copy's create conflicts.
		{"continuation", run("r1", []string{"c1", "c2"}, "c1", "c2"), run("r1", []string{"c1", "c3"}, "c1", "c3"),
			"call c3 (deploy) is not in that batch", []string{"c3"}, true},
		// The first is carried in its one record; the copy, with two waits,
		// writes a continuation and a record before its create of the carried
		// call's record conflicts: both go again.
		{"carried", run("r2", []string{"c1"}, "c1"), run("r2", []string{"c9", "c1"}, "c9", "c1"),
			"call c9 (deploy) is not in that batch", []string{"c9"}, false},
		// The copy would be carried; the first has a continuation.
		{"copy carried", run("r3", []string{"c1", "c2"}, "c1", "c2"), run("r3", []string{"c1"}, "c1"),
			"call c2 (deploy), call 2 of that batch, is missing here", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := first.Park(t.Context(), tc.first); err != nil || got.Before || got.Differs != nil {
				t.Fatalf("first copy: %+v, %v", got, err)
			}
			before := len(secondLive.subjects())
			got, err := second.Park(t.Context(), tc.second)
			if err != nil || !got.Before || got.Differs == nil || !strings.Contains(got.Differs.Error(), tc.want) || len(got.Parked) != 0 {
				t.Fatalf("copy: %+v, %v; want refused with %q", got, err, tc.want)
			}
			if n := len(secondLive.subjects()); n != before {
				t.Fatalf("a refused copy published %d handoff requests", n-before)
			}
			absent(tc.second.Batch.ReplyID, tc.gone...)
			b, err := second.Read.Batch(t.Context(), "s1", tc.second.Batch.ReplyID)
			switch {
			case tc.keep && (err != nil || len(b.Data.Calls) != len(tc.first.Batch.Data.Calls)):
				t.Fatalf("the first's continuation: %+v, %v", b, err)
			case !tc.keep && !store.IsNotFound(err):
				t.Fatalf("the copy's continuation stayed: %+v, %v", b, err)
			}
		})
	}
	// A copy with the same calls is adopted, as before.
	if got, err := second.Park(t.Context(), run("r1", []string{"c1", "c2"}, "c1", "c2")); err != nil || !got.Before || got.Differs != nil || len(got.Parked) != 2 {
		t.Fatalf("an equal copy: %+v, %v", got, err)
	}
}

// Reads.Held, asked by every new batch before it runs, costs a lookup per
// call and no allocation, found or not.
func TestHeldAllocatesNothing(t *testing.T) {
	st := newStore(t)
	s, _ := startLive(t, st, "router-a")
	park(t, s, record("s1", "r1", "c1"))
	calls := []bus.Call{{ID: "c0", Name: "deploy"}, {ID: "c1", Name: "deploy"}}
	if rec := s.Read.Held("s1", "r1", calls); rec == nil || rec.Call.ID != "c1" {
		t.Fatalf("Held found %+v, want c1's record", rec)
	}
	if rec := s.Read.Held("s1", "r2", calls); rec != nil {
		t.Fatalf("Held found %+v for another reply id", rec)
	}
	for _, reply := range []string{"r1", "r2"} {
		if n := testing.AllocsPerRun(100, func() { s.Read.Held("s1", reply, calls) }); n != 0 {
			t.Fatalf("Held (reply %s) allocates %v times", reply, n)
		}
	}
}
