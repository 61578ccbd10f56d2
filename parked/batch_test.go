package parked

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

func newBatch(session, reply string) *Batch {
	return &Batch{Session: session, ReplyID: reply,
		Data: bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: json.RawMessage(`{}`)}}}}
}

func ok(id string) bus.Result {
	return bus.Result{ID: id, Name: "deploy", State: bus.StateSuccess, Output: bus.Text(id)}
}

// parkBatch parks a new batch waiting for the calls waiting.
func parkBatch(t *testing.T, s *Store, session, reply string, waiting ...string) *Batch {
	t.Helper()
	b := newBatch(session, reply)
	if err := s.conts.parkBatch(t.Context(), b, map[string]bus.Result{}, waiting, 1, false); err != nil {
		t.Fatal(err)
	}
	return b
}

func phase(t *testing.T, s *Store, session, reply string) *Batch {
	t.Helper()
	b, err := s.Read.Batch(t.Context(), session, reply)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBatchReady(t *testing.T) {
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
			b := &Batch{Waiting: tc.waiting, Results: map[string]bus.Result{}}
			for _, id := range tc.results {
				b.Results[id] = ok(id)
			}
			if b.Ready() != tc.ready {
				t.Fatalf("Ready = %v", !tc.ready)
			}
		})
	}
}

// Every router that finishes a batch names its batch.done alike, and no
// other batch's: the events stream stores it once by that id.
func TestDoneID(t *testing.T) {
	a := newBatch("s1", "r1")
	taken := &Batch{Session: "s1", ReplyID: "r1", Phase: PhaseResumed, Owner: "other", Results: map[string]bus.Result{"c1": ok("c1")}}
	if a.DoneID() != taken.DoneID() {
		t.Fatalf("the same batch has batch.done ids %s and %s", a.DoneID(), taken.DoneID())
	}
	if n := len(a.DoneID()); n != 22 {
		t.Fatalf("id %s has %d characters, want 22", a.DoneID(), n)
	}
	seen := map[string]string{a.DoneID(): "s1/r1"}
	for _, b := range []*Batch{newBatch("s1", "r2"), newBatch("s2", "r1"), newBatch("s1.r", "1"), newBatch("s1", ".r1"), newBatch("", "s1r1")} {
		k := b.Session + "/" + b.ReplyID
		if prev, dup := seen[b.DoneID()]; dup {
			t.Fatalf("batches %s and %s have the same batch.done id", prev, k)
		}
		seen[b.DoneID()] = k
	}
}

func TestParkBatch(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	b := newBatch("s1", "r1")
	b.TraceParent, b.Expiry = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "2030-01-01T00:00:00Z"
	if err := s.conts.parkBatch(t.Context(), b, map[string]bus.Result{"c0": ok("c0")}, []string{"c1"}, 1, false); err != nil {
		t.Fatal(err)
	}
	got := phase(t, s, "s1", "r1")
	if got.Phase != PhaseRunning || got.Owner != "router-a" || got.Next != 1 || got.Touched.IsZero() ||
		!slices.Equal(got.Waiting, []string{"c1"}) || got.TraceParent != b.TraceParent || got.Expiry != b.Expiry ||
		len(got.Data.Calls) != 1 || got.Results["c0"].ID != "c0" {
		t.Fatalf("parked batch %+v", got)
	}
	// A copy of the batch (a re-send) finds it parked before, on any router.
	for _, other := range []*Store{s, startAs(t, st, "router-b")} {
		if err := other.conts.parkBatch(t.Context(), newBatch("s1", "r1"), nil, nil, 0, false); !errors.Is(err, errParkedBefore) {
			t.Fatalf("second park: %v, want ErrParkedBefore", err)
		}
	}
	// The cache of parked calls ignores continuation keys.
	if ps := s.Read.Parked("", ""); len(ps) != 0 {
		t.Fatalf("a batch continuation is listed as parked: %v", keys(ps))
	}
	if later := start(t, st); len(later.Read.Parked("", "")) != 0 {
		t.Fatal("a store started later lists a batch continuation as parked")
	}
}

// Two copies of one batch (a re-send, docs/protocol.md 3.1) park at once.
// The second finds the first's continuation while the first has written
// one of its two call records: the second writes the other, so each call
// it lists as parked has its record (an answer sent on its reply finds the
// call, 6.1), and publishes that one's request alone. The first then finds
// the record written and counts the call as parked, not failed.
func TestCopyParksWhatTheFirstHasNot(t *testing.T) {
	st := newStore(t)
	first, firstLive := startLive(t, st, "router-a")
	second, secondLive := startLive(t, st, "router-b")
	run := func() Run {
		b := newBatch("s1", "r1")
		b.Data.Calls = []bus.Call{{ID: "c1", Name: "deploy"}, {ID: "c2", Name: "deploy"}}
		return Run{Batch: b, Calls: []*Record{record("s1", "r1", "c1"), record("s1", "r1", "c2")},
			Results: map[string]bus.Result{}, Next: 2, Alone: true}
	}
	r1 := run()
	// The first copy stalls after its continuation and one record.
	if err := first.conts.parkBatch(t.Context(), r1.Batch, r1.Results, []string{"c1", "c2"}, r1.Next, r1.Alone); err != nil {
		t.Fatal(err)
	}
	if err := first.calls.create(t.Context(), r1.Calls[0]); err != nil {
		t.Fatal(err)
	}
	got, err := second.Park(t.Context(), run())
	if err != nil || !got.Before || got.Batch == nil {
		t.Fatalf("second copy: %+v, %v; want parked before", got, err)
	}
	ids := func(recs []*Record) (out []string) {
		for _, r := range recs {
			out = append(out, r.Call.ID+":"+string(r.Status))
		}
		return out
	}
	if want := []string{"c1:parked", "c2:parked"}; !slices.Equal(ids(got.Parked), want) {
		t.Fatalf("second copy lists %v, want %v", ids(got.Parked), want)
	}
	for _, id := range []string{"c1", "c2"} {
		if r, err := second.Read.Get(t.Context(), bus.CallKey("s1", "r1", id)); err != nil || r.Status != bus.ParkParked {
			t.Fatalf("record %s after the second copy's reply: %+v, %v", id, r, err)
		}
	}
	if subs := secondLive.subjects(); len(subs) != 1 {
		t.Fatalf("second copy published %d requests (%v), want 1: c2's, which it wrote", len(subs), subs)
	}
	// The first copy goes on: c2's create conflicts with the record the
	// second wrote, which it counts as parked.
	out, err := first.parkCalls(t.Context(), Run{Batch: r1.Batch, Calls: r1.Calls[1:], Results: r1.Results, Next: r1.Next, Alone: true})
	if err != nil || out.Before || len(out.Failed) != 0 || !slices.Equal(ids(out.Parked), []string{"c2:parked"}) {
		t.Fatalf("first copy after the second: %+v, %v", out, err)
	}
	if subs := firstLive.subjects(); len(subs) != 0 {
		t.Fatalf("first copy published %v for a record it did not write", subs)
	}
	if b := phase(t, first, "s1", "r1"); b.Phase != PhaseParked || !slices.Equal(b.Waiting, []string{"c1", "c2"}) {
		t.Fatalf("continuation after both copies: %+v", b)
	}
	// A copy that finds no continuation (the batch finished between its
	// conflict and its read) writes nothing: it gets the records there are.
	late := run()
	late.Calls = append(late.Calls, record("s1", "r1", "c3"))
	if got := ids(second.join(t.Context(), late, nil)); !slices.Equal(got, []string{"c1:parked", "c2:parked"}) {
		t.Fatalf("a copy without a continuation read %v", got)
	}
	if _, err := second.Read.Get(t.Context(), bus.CallKey("s1", "r1", "c3")); !store.IsNotFound(err) {
		t.Fatalf("a copy without a continuation wrote a record: %v", err)
	}
}

func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiting []string
		answers []string // completed while the run was going
		resume  bool
	}{
		{"answers awaited", []string{"c1", "c2"}, nil, false},
		{"one of two answered during the run", []string{"c1", "c2"}, []string{"c1"}, false},
		{"every answer came in during the run", []string{"c1", "c2"}, []string{"c2", "c1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t)
			s := start(t, st)
			parkBatch(t, s, "s1", "r1", tc.waiting...)
			for _, id := range tc.answers {
				if _, resume, err := s.conts.complete(t.Context(), "s1", "r1", id, ok(id), false); err != nil || resume {
					t.Fatalf("Complete during the run: resume %v, %v (the run resumes it, not the answer)", resume, err)
				}
			}
			b, resume, err := s.Settle(t.Context(), "s1", "r1", map[string]bus.Result{"c0": ok("c0")})
			if err != nil {
				t.Fatal(err)
			}
			if resume != tc.resume {
				t.Fatalf("resume %v, want %v", resume, tc.resume)
			}
			want := PhaseParked
			if tc.resume {
				want = PhaseResumed
			}
			if got := phase(t, s, "s1", "r1"); got.Phase != want || got.Results["c0"].ID != "c0" || b.Phase != want {
				t.Fatalf("after Settle %+v", got)
			}
			if got := phase(t, s, "s1", "r1"); tc.resume != (got.Owner == "router-a") {
				t.Fatalf("owner %q after Settle", got.Owner)
			}
		})
	}
}

func TestCompleteResumesOnce(t *testing.T) {
	st := newStore(t)
	stores := []*Store{startAs(t, st, "router-a"), startAs(t, st, "router-b")}
	const n = 20
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprint("c", i))
	}
	parkBatch(t, stores[0], "s1", "r1", ids...)
	if _, _, err := stores[0].Settle(t.Context(), "s1", "r1", nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var resumers []string
	begin := make(chan struct{})
	for i, id := range ids {
		wg.Go(func() {
			<-begin
			s := stores[i%2]
			b, resume, err := s.conts.complete(t.Context(), "s1", "r1", id, ok(id), false)
			if err != nil {
				t.Errorf("Complete %s: %v", id, err)
				return
			}
			if resume {
				mu.Lock()
				resumers = append(resumers, b.Owner)
				mu.Unlock()
			}
		})
	}
	close(begin)
	wg.Wait()
	b := phase(t, stores[1], "s1", "r1")
	if len(b.Results) != n || !b.Ready() || b.Phase != PhaseResumed {
		t.Fatalf("%d results after %d concurrent completions, phase %s", len(b.Results), n, b.Phase)
	}
	for _, id := range ids {
		if r := b.Results[id]; r.ID != id || r.Output[0].Text != id {
			t.Fatalf("result %s = %+v", id, r)
		}
	}
	if len(resumers) != 1 || resumers[0] != b.Owner {
		t.Fatalf("resumed by %v, want exactly one router, the owner %s", resumers, b.Owner)
	}
}

func TestBatchMissing(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	if _, err := s.Read.Batch(t.Context(), "s1", "nope"); !store.IsNotFound(err) {
		t.Fatalf("GetBatch of a missing batch: %v", err)
	}
	if _, _, err := s.conts.complete(t.Context(), "s1", "nope", "c1", ok("c1"), false); !store.IsNotFound(err) {
		t.Fatalf("Complete of a missing batch: %v", err)
	}
	if err := s.conts.cancel(t.Context(), "s1", "nope", nil); err != nil {
		t.Fatalf("Cancel of a batch that never parked: %v", err)
	}
	if _, err := st.Parked.Put(t.Context(), "s1.bad", []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read.Batch(t.Context(), "s1", "bad"); err == nil || store.IsNotFound(err) {
		t.Fatalf("GetBatch of a corrupt batch: %v", err)
	}
}

func TestCancelMarks(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	parkBatch(t, s, "s1", "r1", "c1")
	for range 2 { // twice: marks are kept once
		if err := s.conts.cancel(t.Context(), "s1", "r1", []string{"c2"}); err != nil {
			t.Fatal(err)
		}
	}
	b := phase(t, s, "s1", "r1")
	if !slices.Equal(b.Cancelled, []string{"c2"}) || !b.IsCancelled("c2") || b.IsCancelled("c3") {
		t.Fatalf("cancelled %v", b.Cancelled)
	}
	if err := s.conts.cancel(t.Context(), "s1", "r1", nil); err != nil {
		t.Fatal(err)
	}
	if b := phase(t, s, "s1", "r1"); !b.IsCancelled("c3") {
		t.Fatalf("cancel of all: %v", b.Cancelled)
	}
}

// TestCancelWhileResuming: a cancel that comes once the last awaited call
// of a batch was answered and a router resumes it (no call of the batch is
// parked any more, docs/protocol.md 3.5) still marks the continuation: on
// the router resuming it, and on another that knows it only from its
// watch. Marks gives the resumed batch the marks written after it was read;
// a cancel of a reply nobody parked writes nothing.
func TestCancelWhileResuming(t *testing.T) {
	st := newStore(t)
	a, b := startAs(t, st, "router-a"), startAs(t, st, "router-b")
	parkBatch(t, a, "s1", "r1", "c1")
	if _, _, err := a.Settle(t.Context(), "s1", "r1", nil); err != nil {
		t.Fatal(err)
	}
	cont, resume, err := a.conts.complete(t.Context(), "s1", "r1", "c1", ok("c1"), false)
	if err != nil || !resume {
		t.Fatalf("complete: %v %v", resume, err)
	}
	if n := len(a.Read.Parked("s1", "r1")) + len(b.Read.Parked("s1", "r1")); n != 0 {
		t.Fatalf("%d calls parked", n)
	}
	if _, err := a.Cancel(t.Context(), "s1", "r1", []string{"c2"}); err != nil {
		t.Fatal(err)
	}
	if cont.IsCancelled("c2") {
		t.Fatal("the batch as read by its resume has a mark written later")
	}
	a.Read.Marks(cont)
	if !cont.IsCancelled("c2") || !phase(t, a, "s1", "r1").IsCancelled("c2") {
		t.Fatalf("after a's cancel: marks %v", cont.Cancelled)
	}
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if !b.conts.knows(BatchKey("s1", "r1")) {
			return errors.New("router b has not seen the continuation")
		}
		return nil
	})
	if _, err := b.Cancel(t.Context(), "s1", "r1", []string{"c3"}); err != nil {
		t.Fatal(err)
	}
	if !phase(t, a, "s1", "r1").IsCancelled("c3") {
		t.Fatal("router b did not mark the continuation")
	}
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if a.Read.Marks(cont); !cont.IsCancelled("c3") {
			return fmt.Errorf("marks %v, want c3 from router b", cont.Cancelled)
		}
		return nil
	})

	if _, err := a.Cancel(t.Context(), "s1", "nobody", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read.Batch(t.Context(), "s1", "nobody"); !store.IsNotFound(err) {
		t.Fatalf("a cancel of an unknown reply wrote: %v", err)
	}
	// Gone, it is forgotten: a later cancel of the reply reads nothing.
	if err := a.Finish(t.Context(), cont); err != nil {
		t.Fatal(err)
	}
	if a.conts.knows(BatchKey("s1", "r1")) {
		t.Fatal("a finished continuation is still known")
	}
}

func TestRenewAndTakeOver(t *testing.T) {
	st := newStore(t)
	a, b, c := startAs(t, st, "router-a"), startAs(t, st, "router-b"), startAs(t, st, "router-c")
	parkBatch(t, a, "s1", "r1", "c1")

	// The owner renews its lease (here to a time an hour ago, standing in
	// for a router that stopped renewing then); nobody takes over a batch
	// whose lease is not older than the cutoff.
	past := time.Now().Add(-time.Hour).UTC()
	if err := a.Renew(t.Context(), past); err != nil {
		t.Fatal(err)
	}
	if got := phase(t, a, "s1", "r1"); !got.Touched.Equal(past) {
		t.Fatalf("touched %v after renew at %v", got.Touched, past)
	}
	if got := b.conts.takeOver(t.Context(), past); len(got) != 0 {
		t.Fatalf("a batch renewed at the cutoff was taken over: %+v", got)
	}

	// Once the lease is stale, two routers race for it: one wins.
	cutoff := past.Add(time.Minute)
	waitActive(t, cutoff, b, c)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	for _, s := range []*Store{b, c} {
		wg.Go(func() {
			for _, got := range s.conts.takeOver(t.Context(), cutoff) {
				mu.Lock()
				won = append(won, got.Owner)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d routers took the batch over, want 1: %v", len(won), won)
	}
	got := phase(t, a, "s1", "r1")
	if got.Owner != won[0] || got.Phase != PhaseResumed || got.ResumedBy != "takeover" {
		t.Fatalf("after the takeover %+v", got)
	}
	// The old owner's renewal no longer touches it, and it lets it go.
	if err := a.Renew(t.Context(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if again := phase(t, a, "s1", "r1"); again.Owner != won[0] || !again.Touched.Equal(got.Touched) {
		t.Fatalf("the old owner renewed a batch taken from it: %+v", again)
	}
	// Its ParkBatch for the same batch (it was still running) is refused.
	if err := a.conts.parkBatch(t.Context(), got, nil, nil, 1, false); err == nil {
		t.Fatal("the old owner parked more calls of a batch taken over")
	}
}

func TestAnswerDuringTakeOver(t *testing.T) {
	st := newStore(t)
	a, b := startAs(t, st, "router-a"), startAs(t, st, "router-b")
	parkBatch(t, a, "s1", "r1", "c1")
	park(t, a, record("s1", "r1", "c1"))
	past := time.Now().Add(-time.Hour)
	if err := a.Renew(t.Context(), past); err != nil { // router a stopped renewing an hour ago
		t.Fatal(err)
	}
	cutoff := past.Add(time.Minute)
	waitActive(t, cutoff, b)
	// The answer and the takeover race; both land, and the batch resumes
	// through the takeover (the completion sees it active, not parked).
	var wg sync.WaitGroup
	var resumed bool
	var taken []*Batch
	wg.Go(func() {
		rec, err := testAnswer(a, t.Context(), "s1.r1.c1", "deploy", &bus.Answer{State: bus.StateSuccess, Output: bus.Text("done")}, nil)
		if err != nil {
			t.Errorf("answer: %v", err)
			return
		}
		if _, err := a.calls.end(t.Context(), rec.Key(), bus.ParkAnswered, bus.ParkDone, ok("c1")); err != nil {
			t.Errorf("close: %v", err)
		}
		_, resumed, err = a.conts.complete(t.Context(), "s1", "r1", "c1", ok("c1"), false)
		if err != nil {
			t.Errorf("complete: %v", err)
		}
	})
	wg.Go(func() { taken = b.conts.takeOver(t.Context(), cutoff) })
	wg.Wait()
	got := phase(t, a, "s1", "r1")
	if got.Results["c1"].ID != "c1" {
		t.Fatalf("the answer's result was lost in the takeover: %+v", got)
	}
	if resumed || len(taken) != 1 || got.Owner != "router-b" {
		t.Fatalf("resumed by the answer %v, taken over %d times, owner %s: want one takeover and no resume by the answer", resumed, len(taken), got.Owner)
	}
}

func TestFinish(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	b := parkBatch(t, s, "s1", "r1", "c1")
	// Call records of the same reply are not touched.
	park(t, s, record("s1", "r1", "c1"))
	for range 2 {
		if err := s.Finish(t.Context(), b); err != nil {
			t.Fatalf("Finish: %v", err)
		}
	}
	if _, err := s.Read.Batch(t.Context(), "s1", "r1"); !store.IsNotFound(err) {
		t.Fatalf("GetBatch after Finish: %v", err)
	}
	if ps := s.Read.Parked("s1", "r1"); len(ps) != 1 {
		t.Fatalf("Finish touched call records: %v", keys(ps))
	}
	// The key can be parked again.
	parkBatch(t, s, "s1", "r1")
	if BatchKey("s1", "r1") != "s1.r1" || (&Record{Session: "s1", ReplyID: "r1", Call: bus.Call{ID: "c1"}}).Key() != "s1.r1.c1" {
		t.Fatal("key layout")
	}
}

// waitActive waits until the stores' caches list s1.r1 as stale at
// cutoff, which is what TakeOver reads.
func waitActive(t *testing.T, cutoff time.Time, stores ...*Store) {
	t.Helper()
	for _, s := range stores {
		testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
			if len(s.conts.stale(cutoff)) == 0 {
				return errors.New("the watch has not delivered the batch yet")
			}
			return nil
		})
	}
}

func TestTakeOverAnswers(t *testing.T) {
	st := newStore(t)
	a, b, c := startAs(t, st, "router-a"), startAs(t, st, "router-b"), startAs(t, st, "router-c")
	rec := park(t, a, record("s1", "r1", "c1"))
	yes := true
	got, err := testAnswer(a, t.Context(), rec.Key(), "deploy", &bus.Answer{Confirmed: &yes}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "router-a" || got.Touched.IsZero() {
		t.Fatalf("answered record %+v carries no lease", got)
	}
	// While router a renews, nobody takes the answer over.
	if err := a.Renew(t.Context(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if taken := b.calls.takeOverAnswers(t.Context(), time.Now().Add(-time.Minute)); len(taken) != 0 {
		t.Fatalf("a renewed answer was taken over: %+v", taken)
	}
	// Router a stops renewing (it died); b and c race for it, one wins.
	past := time.Now().Add(-time.Hour)
	if err := a.Renew(t.Context(), past); err != nil {
		t.Fatal(err)
	}
	cutoff := past.Add(time.Minute)
	for _, s := range []*Store{b, c} {
		testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
			if n := len(s.calls.answeredBefore(cutoff)); n == 0 {
				return errors.New("the watch has not delivered the renewal yet")
			}
			return nil
		})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []*Record
	for _, s := range []*Store{b, c} {
		wg.Go(func() {
			got := s.calls.takeOverAnswers(t.Context(), cutoff)
			mu.Lock()
			won = append(won, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(won) != 1 || won[0].Status != bus.ParkAnswered || won[0].Answer == nil {
		t.Fatalf("taken over %d times: %+v", len(won), won)
	}
	// The winner closes it; a late close by the dead owner is refused.
	winner := b
	if won[0].Owner == "router-c" {
		winner = c
	}
	if _, err := winner.calls.end(t.Context(), rec.Key(), bus.ParkAnswered, bus.ParkDone, ok("c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.calls.end(t.Context(), rec.Key(), bus.ParkAnswered, bus.ParkDone, ok("c1")); !errors.Is(err, bus.ErrNotParked) {
		t.Fatalf("second close: %v, want not_parked", err)
	}
}
