package external_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/external"
	"github.com/toolbus/toolbus/store"
)

func newBatch(session, reply string, waiting ...string) *external.Batch {
	return &external.Batch{Session: session, ReplyID: reply, Phase: external.PhaseRunning,
		Data:    bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: json.RawMessage(`{}`)}}},
		Results: map[string]bus.Result{}, Waiting: waiting}
}

func TestBatchReady(t *testing.T) {
	res := bus.Result{State: bus.StateSuccess}
	for _, tc := range []struct {
		name    string
		waiting []string
		results []string
		ready   bool
	}{
		{"nothing awaited", nil, nil, true},
		{"none in", []string{"a", "b"}, nil, false},
		{"one of two", []string{"a", "b"}, []string{"a"}, false},
		{"all in", []string{"a", "b"}, []string{"b", "a"}, true},
		{"other results do not count", []string{"a"}, []string{"x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBatch("s", "r", tc.waiting...)
			for _, id := range tc.results {
				b.Results[id] = res
			}
			if b.Ready() != tc.ready {
				t.Fatalf("Ready = %v", !tc.ready)
			}
		})
	}
}

func TestBatchPutGet(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	b := newBatch("s1", "r1", "c1")
	b.TraceParent, b.Expiry, b.Next = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "2030-01-01T00:00:00Z", 1
	if err := s.PutBatch(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	// Created under <session>.<reply>: a second create of a new batch fails.
	if err := s.PutBatch(t.Context(), newBatch("s1", "r1")); !store.IsConflict(err) {
		t.Fatalf("second create: %v, want a conflict", err)
	}
	got, err := s.GetBatch(t.Context(), "s1", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Session != "s1" || got.ReplyID != "r1" || got.Phase != external.PhaseRunning || got.Next != 1 ||
		!slices.Equal(got.Waiting, []string{"c1"}) || got.TraceParent != b.TraceParent || got.Expiry != b.Expiry || len(got.Data.Calls) != 1 {
		t.Fatalf("GetBatch %+v", got)
	}
	// A write from a stale copy loses.
	stale, _ := s.GetBatch(t.Context(), "s1", "r1")
	got.Phase = external.PhaseParked
	if err := s.PutBatch(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	stale.Phase = external.PhaseDone
	if err := s.PutBatch(t.Context(), stale); !store.IsConflict(err) {
		t.Fatalf("stale write: %v, want a conflict", err)
	}
	if now, _ := s.GetBatch(t.Context(), "s1", "r1"); now.Phase != external.PhaseParked {
		t.Fatalf("phase %s after a lost write", now.Phase)
	}
	// The cache of parked calls ignores continuation keys.
	if ps := s.Parked("", ""); len(ps) != 0 {
		t.Fatalf("a batch continuation is listed as parked: %v", keys(ps))
	}
	if later := start(t, st); len(later.Parked("", "")) != 0 {
		t.Fatal("a store started later lists a batch continuation as parked")
	}
}

func TestBatchMissing(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	if _, err := s.GetBatch(t.Context(), "s1", "nope"); !store.IsNotFound(err) {
		t.Fatalf("GetBatch of a missing batch: %v", err)
	}
	ran := false
	if _, err := s.UpdateBatch(t.Context(), "s1", "nope", func(*external.Batch) error { ran = true; return nil }); !store.IsNotFound(err) {
		t.Fatalf("UpdateBatch of a missing batch: %v", err)
	}
	if ran {
		t.Fatal("fn ran for a missing batch")
	}
	if _, err := st.Parked.Put(t.Context(), "s1.bad", []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBatch(t.Context(), "s1", "bad"); err == nil || store.IsNotFound(err) {
		t.Fatalf("GetBatch of a corrupt batch: %v", err)
	}
}

func TestUpdateBatchConcurrent(t *testing.T) {
	st := newStore(t)
	stores := []*external.Store{start(t, st), start(t, st)}
	const n = 20
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprint("c", i))
	}
	if err := stores[0].PutBatch(t.Context(), newBatch("s1", "r1", ids...)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	begin := make(chan struct{})
	var readyMu sync.Mutex
	readySeen := 0
	for i, id := range ids {
		wg.Go(func() {
			<-begin
			b, err := stores[i%2].UpdateBatch(t.Context(), "s1", "r1", func(b *external.Batch) error {
				if b.Results == nil {
					b.Results = map[string]bus.Result{}
				}
				b.Results[id] = bus.Result{ID: id, Name: "deploy", State: bus.StateSuccess, Output: bus.Text(id)}
				return nil
			})
			if err == nil && b.Ready() {
				readyMu.Lock()
				readySeen++
				readyMu.Unlock()
			}
			errs <- err
		})
	}
	close(begin)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("update: %v", err)
		}
	}
	b, err := stores[1].GetBatch(t.Context(), "s1", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Results) != n || !b.Ready() {
		t.Fatalf("%d results after %d concurrent updates", len(b.Results), n)
	}
	for _, id := range ids {
		if r := b.Results[id]; r.ID != id || len(r.Output) != 1 || r.Output[0].Text != id {
			t.Fatalf("result %s = %+v", id, r)
		}
	}
	// Exactly one updater recorded the last awaited result.
	if readySeen != 1 {
		t.Fatalf("%d updaters saw the batch ready, want exactly 1 (the one that resumes it)", readySeen)
	}
}

func TestUpdateBatchFnError(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	if err := s.PutBatch(t.Context(), newBatch("s1", "r1", "c1")); err != nil {
		t.Fatal(err)
	}
	before, _ := st.Parked.Get(t.Context(), "s1.r1")
	stop := errors.New("already resumed")
	if _, err := s.UpdateBatch(t.Context(), "s1", "r1", func(b *external.Batch) error {
		b.Phase = external.PhaseResumed
		return stop
	}); !errors.Is(err, stop) {
		t.Fatalf("err %v", err)
	}
	after, _ := st.Parked.Get(t.Context(), "s1.r1")
	if after.Revision() != before.Revision() {
		t.Fatal("a failed update wrote the batch")
	}
}

func TestDeleteBatch(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	b := newBatch("s1", "r1", "c1")
	if err := s.PutBatch(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	// Call records of the same reply are not touched.
	park(t, s, record("s1", "r1", "c1"))
	for range 2 {
		if err := s.DeleteBatch(t.Context(), b); err != nil {
			t.Fatalf("DeleteBatch: %v", err)
		}
	}
	if _, err := s.GetBatch(t.Context(), "s1", "r1"); !store.IsNotFound(err) {
		t.Fatalf("GetBatch after delete: %v", err)
	}
	if ps := s.Parked("s1", "r1"); len(ps) != 1 {
		t.Fatalf("DeleteBatch touched call records: %v", keys(ps))
	}
	// The key can be created again.
	if err := s.PutBatch(t.Context(), newBatch("s1", "r1")); err != nil {
		t.Fatalf("PutBatch after delete: %v", err)
	}
	if external.BatchKey("s1", "r1") != "s1.r1" || (&external.Record{Session: "s1", ReplyID: "r1", Call: bus.Call{ID: "c1"}}).Key() != "s1.r1.c1" {
		t.Fatal("key layout")
	}
}
