package parked

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestAttackParkedCarriedResults (bounds37, park33's open row): a batch
// whose last call alone waits is carried in that call's record (1.6) with
// its earlier calls' results, inline up to the inline limit, and the
// ended record kept them for P_parked's 7 days (four batches with a
// 300 KiB earlier result, ended: 1.2 MB). Once batch.done is stored
// (Finish) the record keeps the batch's calls, for copies to be compared
// with, but not results of 1 KiB or more (1.27); small ones cost no write.
func TestAttackParkedCarriedResults(t *testing.T) {
	st := newStore(t)
	s, other := start(t, st), startAs(t, st, "router-b")
	ctx := t.Context()
	run := func(reply, earlier string, kib int) Run {
		r := record("s1", reply, "c1")
		b := newBatch("s1", reply)
		b.Data.Calls = []bus.Call{{ID: "c0", Name: "echo", Input: bigInput(2, earlier)}, r.Call}
		res := bus.Result{ID: "c0", Name: "echo", State: bus.StateSuccess, Output: bus.Text(strings.Repeat("r", kib<<10))}
		return Run{Batch: b, Calls: []*Record{r}, Results: map[string]bus.Result{"c0": res}, Next: 2, Alone: true}
	}
	end := func(reply string, kib int) {
		t.Helper()
		if _, err := s.Park(ctx, run(reply, "a", kib)); err != nil {
			t.Fatal(err)
		}
		ended, err := s.Cancel(ctx, "s1", reply, nil)
		if err != nil || len(ended) != 1 || !unfinished(ended[0]) {
			t.Fatalf("cancel: %v, %v", ended, err)
		}
		b, resume, err := s.Resume(ctx, ended[0], *ended[0].Result, func(*Batch) {})
		if err != nil || !resume || len(b.Results["c0"].Output[0].Text) != kib<<10 {
			t.Fatalf("resume: %v, %v (batch.done needs the earlier result whole)", resume, err)
		}
		if err := s.Finish(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	before := storedBytes(t, s)
	for i := range 4 {
		end(fmt.Sprintf("r%d", i), 300)
	}
	grew := storedBytes(t, s) - before
	if grew > 4*3<<10 {
		t.Fatalf("P_parked grew by %d bytes for 4 carried batches with a 300 KiB earlier result, ended", grew)
	}
	t.Logf("P_parked grew by %d bytes for 4 carried batches with a 300 KiB earlier result, ended", grew)
	rec, err := other.Read.Get(ctx, bus.CallKey("s1", "r0", "c1"))
	if err != nil || unfinished(rec) || rec.Result == nil {
		t.Fatalf("the finished record: %+v, %v (Lone must not publish its batch.done again)", rec, err)
	}
	if got, err := other.Park(ctx, run("r0", "a", 300)); err != nil || !got.Before || got.Differs != nil || got.Batch == nil || len(got.Batch.Results) != 0 {
		t.Fatalf("a copy of a finished carried batch: %+v, %v", got, err)
	}
	if got, err := other.Park(ctx, run("r1", "b", 300)); err != nil || !got.Before || got.Differs == nil {
		t.Fatalf("a copy with another earlier input: %+v, %v", got, err)
	}

	end("small", 0) // a small earlier result: no write more
	rec, err = s.Read.Get(ctx, bus.CallKey("s1", "small", "c1"))
	if err != nil || carried(rec).Results["c0"].ID != "c0" {
		t.Fatalf("a small carried batch, finished: %+v, %v", rec, err)
	}
}
