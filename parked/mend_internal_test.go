package parked

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// lease stands for the routers' lease (three heartbeats) in these tests.
const lease = 15 * time.Second

// stranded is the keys of what s finds stranded a lease before now.
func stranded(t *testing.T, s *Store) []string {
	t.Helper()
	var keys []string
	for _, r := range s.Mends.Stranded(t.Context(), lease) {
		keys = append(keys, r.Key())
	}
	slices.Sort(keys)
	return keys
}

// notes is how many ended calls s still looks after.
func notes(s *Store) int {
	e := &s.calls.ended
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.m)
}

// parkQueued parks call c1 of tool deploy, waiting alone, in a batch with a
// queued call q after it: the continuation is under the batch's key.
func (m *machine) parkQueued(t *testing.T, reply string) *Record {
	t.Helper()
	r := record("s1", reply, "c1")
	b := &Batch{Session: "s1", ReplyID: reply, Data: bus.Batch{Calls: []bus.Call{r.Call, {ID: "q", Name: "solo"}}}}
	got, err := m.a.Park(t.Context(), Run{Batch: b, Calls: []*Record{r}, Results: map[string]bus.Result{}, Next: 1, Alone: true})
	if err != nil || got.Batch.Phase != PhaseParked {
		t.Fatalf("park: %+v %v", got, err)
	}
	return got.Parked[0]
}

// TestMend: a router that ends a call (answer, expiry, cancel, the close
// of a confirmed run) and stops before its Resume leaves the batch's
// continuation waiting for a result no answer can bring any more
// (docs/protocol.md 6.1, 1.11). Once a lease has passed since the routers
// saw the call end, they find it (Stranded) and one of them adds its
// result (Mend) and resumes the batch when that was the last one.
func TestMend(t *testing.T) {
	answer := answerDone
	t.Run("a result lost with its router joins once, after a lease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			p := m.park(t, "r1", bus.KindExternal, true, "c1", "c2")
			answer(t, m.a, p.Parked[0].Key()) // router-a stops here, before Resume
			synctest.Wait()
			if got := stranded(t, m.b); len(got) != 0 {
				t.Fatalf("stranded before a lease passed: %v", got)
			}
			time.Sleep(lease + time.Second)
			for _, s := range []*Store{m.a, m.b} {
				if got := stranded(t, s); !slices.Equal(got, []string{"s1.r1.c1"}) {
					t.Fatalf("%s finds stranded %v, want s1.r1.c1", s.cfg.Owner, got)
				}
			}
			rec, _ := m.b.Read.Get(t.Context(), "s1.r1.c1")
			before, reports := m.kv.writes, 0
			cont, resume, err := m.b.Mends.Mend(t.Context(), rec, *rec.Result, func(*Batch) { reports++ })
			if err != nil || resume || reports != 1 || cont.Results["c1"].ID != "c1" || cont.Phase != PhaseParked || m.kv.writes != before+1 {
				t.Fatalf("mend: %+v resume %v, %d reports, %v, %d writes", cont, resume, reports, err, m.kv.writes-before)
			}
			// The other router, late, finds the result in: no event, no write.
			if cont, resume, err := m.a.Mends.Mend(t.Context(), rec, *rec.Result, func(*Batch) { t.Fatal("reported a mended result") }); cont != nil || resume || err != nil || m.kv.writes != before+1 {
				t.Fatalf("second mend: %+v %v %v", cont, resume, err)
			}
			synctest.Wait()
			time.Sleep(lease + time.Second)
			for _, s := range []*Store{m.a, m.b} {
				if got := stranded(t, s); len(got) != 0 || notes(s) != 0 {
					t.Fatalf("%s: stranded %v, %d notes after the mend", s.cfg.Owner, got, notes(s))
				}
			}
			// The batch goes on as any: the last answer resumes it.
			r2 := answer(t, m.b, p.Parked[1].Key())
			if cont, resume, err := m.b.Resume(t.Context(), r2, *r2.Result, func(*Batch) {}); err != nil || !resume || len(cont.Results) != 2 {
				t.Fatalf("last answer: %+v %v %v", cont, resume, err)
			}
		})
	})
	t.Run("the last result mended resumes the batch and its queued call", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			rec := answer(t, m.a, m.parkQueued(t, "r1").Key())
			synctest.Wait()
			time.Sleep(lease + time.Second)
			if got := stranded(t, m.b); len(got) != 1 {
				t.Fatalf("stranded %v", got)
			}
			cont, resume, err := m.b.Mends.Mend(t.Context(), rec, *rec.Result, func(*Batch) {})
			if err != nil || !resume || cont.Phase != PhaseResumed || cont.Owner != "router-b" || cont.Next != 1 || !m.b.conts.leases.holds(batchKey("s1.r1")) {
				t.Fatalf("mend: %+v resume %v, %v", cont, resume, err)
			}
			// router-a was only slow: its Resume now resumes nothing.
			if _, resume, err := m.a.Resume(t.Context(), rec, *rec.Result, func(*Batch) {}); err != nil || resume {
				t.Fatalf("the slow router resumed a mended batch too: %v %v", resume, err)
			}
			if got, _ := m.a.Read.Batch(t.Context(), "s1", "r1"); got.Owner != "router-b" || got.Phase != PhaseResumed {
				t.Fatalf("after the slow Resume: %+v", got)
			}
		})
	})
	t.Run("expired and cancelled calls are mended too", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			m.parkQueued(t, "r1")
			m.parkQueued(t, "r2")
			synctest.Wait()
			if ended, err := m.a.Cancel(t.Context(), "s1", "r2", nil); err != nil || len(ended) != 1 {
				t.Fatalf("cancel: %v %v", ended, err)
			}
			time.Sleep(ttl + time.Second)
			if ended := m.a.Expire(t.Context(), time.Now()); len(ended) != 1 {
				t.Fatalf("expire: %v", ended)
			}
			synctest.Wait()
			time.Sleep(lease + time.Second)
			got := m.b.Mends.Stranded(t.Context(), lease)
			if len(got) != 2 {
				t.Fatalf("stranded %d, want the expired and the cancelled call", len(got))
			}
			for _, rec := range got {
				cont, resume, err := m.b.Mends.Mend(t.Context(), rec, *rec.Result, func(*Batch) {})
				if err != nil || !resume {
					t.Fatalf("mend %s: %v %v", rec.Key(), resume, err)
				}
				want := map[string]string{"r1": bus.CodeTimeout, "r2": bus.CodeInterrupted}[rec.ReplyID]
				if res := cont.Results["c1"]; res.Error == nil || res.Error.Code != want {
					t.Fatalf("%s: result %+v, want %s", rec.Key(), res, want)
				}
			}
		})
	})
	t.Run("the happy path costs no read or write", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			rec := answer(t, m.a, m.parkQueued(t, "r1").Key())
			if _, resume, err := m.a.Resume(t.Context(), rec, *rec.Result, func(*Batch) {}); err != nil || !resume {
				t.Fatalf("resume: %v %v", resume, err)
			}
			synctest.Wait()
			if notes(m.b) != 1 {
				t.Fatalf("%d notes, want the ended call's", notes(m.b))
			}
			time.Sleep(lease + time.Second)
			writes, gets := m.kv.writes, m.kv.gets
			if got := stranded(t, m.b); len(got) != 0 || m.kv.writes != writes || m.kv.gets != gets || notes(m.b) != 0 {
				t.Fatalf("stranded %v, %d writes, %d reads, %d notes", got, m.kv.writes-writes, m.kv.gets-gets, notes(m.b))
			}
		})
	})
	t.Run("a running batch is left to its router; a carried one is never noted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			p := m.park(t, "r1", bus.KindExternal, false, "c1", "c2") // router-a's run goes on
			answer(t, m.b, p.Parked[0].Key())                         // router-b stops before Resume
			carried := m.park(t, "r2", bus.KindExternal, true, "c9").Parked[0]
			answer(t, m.b, carried.Key()) // and here too
			synctest.Wait()
			time.Sleep(lease + time.Second)
			if got := stranded(t, m.a); len(got) != 0 || notes(m.a) != 1 {
				t.Fatalf("stranded %v, %d notes: want none, and the running batch's call kept", got, notes(m.a))
			}
			if _, resume, err := m.a.Settle(t.Context(), "s1", "r1", nil); err != nil || resume {
				t.Fatalf("settle: %v %v", resume, err)
			}
			synctest.Wait()
			if got := stranded(t, m.a); !slices.Equal(got, []string{"s1.r1.c1"}) {
				t.Fatalf("stranded %v once the batch waits for answers", got)
			}
		})
	})
}

// TestAwaits tables what the cached continuation of an ended call's batch
// says about it, and which records count as ended in such a batch.
func TestAwaits(t *testing.T) {
	n := endedCall{session: "s1", replyID: "r1", callID: "c1"}
	for _, tc := range []struct {
		name string
		cont *openBatch // nil: none cached
		want await
	}{
		{"no continuation (finished, or carried)", nil, awaitNone},
		{"parked, without the result", &openBatch{phase: PhaseParked, missing: []string{"c2", "c1"}}, awaitStranded},
		{"parked, with the result", &openBatch{phase: PhaseParked, missing: []string{"c2"}}, awaitNone},
		{"running, without the result", &openBatch{phase: PhaseRunning, missing: []string{"c1"}}, awaitRunning},
		{"resumed, without the result", &openBatch{phase: PhaseResumed, missing: []string{"c1"}}, awaitRunning},
		{"parked, waiting for other calls now", &openBatch{phase: PhaseParked, missing: []string{"c7"}}, awaitNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &conts{known: store.NewCache[openBatch](goneMemory)}
			if tc.cont != nil {
				c.known.Put("s1.r1", 1, *tc.cont)
			}
			if got := c.awaits(n); got != tc.want {
				t.Fatalf("awaits = %v, want %v", got, tc.want)
			}
		})
	}
	res := ok("c1")
	for _, tc := range []struct {
		status bus.ParkStatus
		result *bus.Result
		batch  json.RawMessage
		want   bool
	}{
		{bus.ParkParked, nil, nil, false},
		{bus.ParkAnswered, nil, nil, false},
		{bus.ParkDone, &res, nil, true},
		{bus.ParkExpired, &res, nil, true},
		{bus.ParkCancelled, &res, nil, true},
		{bus.ParkDone, nil, nil, false}, // a 1.4 router's answer: its result came apart
		{bus.ParkDone, &res, json.RawMessage(`{}`), false},
	} {
		r := &Record{Status: tc.status, Result: tc.result, Batch: tc.batch}
		if got := endsInBatch(r); got != tc.want {
			t.Errorf("endsInBatch(%s, result %v, batch %s) = %v", tc.status, tc.result != nil, tc.batch, got)
		}
	}
}

// TestResultID: the call.result id of a parked call is the same wherever
// it is made, 22 characters, and differs between calls and from the
// batch's batch.done.
func TestResultID(t *testing.T) {
	id := ResultID("s1", "r1", "c1")
	if id != ResultID("s1", "r1", "c1") || len(id) != 22 {
		t.Fatalf("id %q", id)
	}
	seen := map[string]string{id: "s1/r1/c1", newBatch("s1", "r1").DoneID(): "batch.done"}
	for _, k := range [][3]string{{"s1", "r1", "c2"}, {"s1", "r2", "c1"}, {"s2", "r1", "c1"}, {"s1.r", "1", "c1"}, {"s1", "r1.c", "1"}, {"s1", "r1c", "1"}} {
		got := ResultID(k[0], k[1], k[2])
		if prev, dup := seen[got]; dup {
			t.Fatalf("%v has the id of %s", k, prev)
		}
		seen[got] = k[0] + "/" + k[1] + "/" + k[2]
	}
}

// answerDone answers the parked call key of tool deploy with its result,
// as the router s does before its Resume.
func answerDone(t *testing.T, s *Store, key string) *Record {
	t.Helper()
	got, err := s.Answer(t.Context(), key, "deploy", &bus.Answer{State: bus.StateSuccess}, verdict(Done, ok(key[strings.LastIndexByte(key, '.')+1:])))
	if err != nil {
		t.Fatal(err)
	}
	return got.Record
}

// parkOn parks, through s, a batch of reply waiting for call c1 with a
// queued call after it (queued), or for c1 and c2 (not carried: two
// waits) with c2 answered already: either way c1's result is the last
// one awaited.
func parkOn(t *testing.T, s *Store, reply string, queued bool) *Record {
	t.Helper()
	recs := []*Record{record("s1", reply, "c1")}
	b := &Batch{Session: "s1", ReplyID: reply, Data: bus.Batch{Calls: []bus.Call{recs[0].Call}}}
	if queued {
		b.Data.Calls = append(b.Data.Calls, bus.Call{ID: "q", Name: "solo"})
	} else {
		recs = append(recs, record("s1", reply, "c2"))
		b.Data.Calls = append(b.Data.Calls, recs[1].Call)
	}
	got, err := s.Park(t.Context(), Run{Batch: b, Calls: recs, Results: map[string]bus.Result{}, Next: len(recs), Alone: true})
	if err != nil || got.Batch.Phase != PhaseParked || len(got.Parked) != len(recs) {
		t.Fatalf("park: %+v %v", got, err)
	}
	if !queued {
		r2 := answerDone(t, s, recs[1].Key())
		if _, resume, err := s.Resume(t.Context(), r2, *r2.Result, func(*Batch) {}); err != nil || resume {
			t.Fatalf("c2: resume %v %v", resume, err)
		}
	}
	return answerDone(t, s, recs[0].Key())
}

// TestMendRacesResume: the router that ended a call, only slow, records its
// result while two others mend the batch at the same moment, on a real
// nats-server: the result joins, the batch resumes once, with it, on one
// of them, and the call.result is reported by at most each of them, with a
// queued call (an update). With nothing left to run, the slow router's
// Resume finishes the batch with no write (its batch.done goes out before
// Finish removes the continuation: docs/protocol.md 1.13), and at most one
// mend resumes it besides; both publish the same batch.done by its id.
func TestMendRacesResume(t *testing.T) {
	st := newStore(t)
	routers := []*Store{startAs(t, st, "router-a"), startAs(t, st, "router-b"), startAs(t, st, "router-c")}
	for _, queued := range []bool{false, true} {
		for i := range 15 {
			reply := fmt.Sprintf("r%d-%v", i, queued)
			rec := parkOn(t, routers[0], reply, queued)
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				resumed []string
				start   = make(chan struct{})
			)
			for k, s := range routers {
				join := s.Mends.Mend
				if k == 0 {
					join = s.Resume
				}
				wg.Go(func() {
					<-start
					cont, resume, err := join(t.Context(), rec, *rec.Result, func(*Batch) {})
					if err != nil {
						t.Errorf("%s: %v", s.cfg.Owner, err)
					}
					if !resume {
						return
					}
					if cont.Results["c1"].ID != "c1" {
						t.Errorf("%s resumed without the result: %+v", s.cfg.Owner, cont)
					}
					mu.Lock()
					resumed = append(resumed, s.cfg.Owner)
					mu.Unlock()
				})
			}
			close(start)
			wg.Wait()
			if !queued {
				// Resume finishes it unless a mend landed before it read the
				// continuation; at most one mend lands.
				mends := slices.DeleteFunc(slices.Clone(resumed), func(o string) bool { return o == "router-a" })
				if len(resumed) == 0 || len(mends) > 1 {
					t.Fatalf("batch %s resumed by %v, want Resume, or one mend, or both", reply, resumed)
				}
				cont, err := routers[0].Read.Batch(t.Context(), "s1", reply)
				switch {
				case err != nil:
					t.Fatalf("batch %s after the race: %v", reply, err)
				case len(mends) == 0 && (cont.Phase != PhaseParked || !cont.lacks("c1")):
					t.Fatalf("batch %s after the race, mended by none: %+v", reply, cont)
				case len(mends) == 1 && (cont.Phase != PhaseResumed || cont.Owner != mends[0] || cont.Results["c1"].ID != "c1"):
					t.Fatalf("batch %s after the race, resumed by %v: %+v", reply, resumed, cont)
				}
				if err := routers[0].Finish(t.Context(), cont); err != nil {
					t.Fatal(err)
				}
				if _, err := routers[0].Read.Batch(t.Context(), "s1", reply); !store.IsNotFound(err) {
					t.Fatalf("batch %s after Finish: %v", reply, err)
				}
				continue
			}
			if len(resumed) != 1 {
				t.Fatalf("batch %s resumed by %v, want once", reply, resumed)
			}
			// Whoever resumed it holds it; a resumed batch is never parked
			// again without the result.
			if cont, err := routers[0].Read.Batch(t.Context(), "s1", reply); err == nil {
				if cont.Phase != PhaseResumed || cont.Owner != resumed[0] || cont.Results["c1"].ID != "c1" {
					t.Fatalf("batch %s after the race: %+v, resumed by %s", reply, cont, resumed[0])
				}
			} else if !store.IsNotFound(err) || queued {
				t.Fatalf("batch %s after the race: %v", reply, err)
			}
		}
	}
}
