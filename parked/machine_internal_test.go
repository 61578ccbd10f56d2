package parked

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// memKV is P_parked in memory: Get, Create, Update, Delete with
// compare-and-set, and Watch (the current values, the end-of-initial
// marker, then every change), so that the machine runs inside a
// testing/synctest bubble. It counts its writes and reads.
type memKV struct {
	jetstream.KeyValue // the methods the machine does not use: nil, they panic
	mu                 sync.Mutex
	rev                uint64
	vals               map[string]memEntry
	watchers           []memWatch
	writes, gets       int
	// after, when set, runs outside the lock after each write lands, with
	// its key: another router's work interleaved at that point.
	after func(key string)
}

type memEntry struct {
	key string
	val []byte
	rev uint64
	op  jetstream.KeyValueOp
}

func (e memEntry) Bucket() string                  { return "parked" }
func (e memEntry) Key() string                     { return e.key }
func (e memEntry) Value() []byte                   { return e.val }
func (e memEntry) Revision() uint64                { return e.rev }
func (e memEntry) Created() time.Time              { return time.Now() }
func (e memEntry) Delta() uint64                   { return 0 }
func (e memEntry) Operation() jetstream.KeyValueOp { return e.op }

type memWatch struct {
	tokens int
	ch     chan jetstream.KeyValueEntry
}

func (w memWatch) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w memWatch) Stop() error                             { return nil }

func newMemKV() *memKV { return &memKV{vals: map[string]memEntry{}} }

func (k *memKV) Bucket() string { return "parked" }

func (k *memKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gets++
	e, ok := k.vals[key]
	if !ok || e.op != jetstream.KeyValuePut {
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

func (k *memKV) Watch(_ context.Context, keys string, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := memWatch{tokens: strings.Count(keys, ".") + 1, ch: make(chan jetstream.KeyValueEntry, 1024)}
	for _, e := range k.vals {
		if w.matches(e.key) {
			w.ch <- e
		}
	}
	w.ch <- nil
	k.watchers = append(k.watchers, w)
	return w, nil
}

func (w memWatch) matches(key string) bool { return strings.Count(key, ".")+1 == w.tokens }

func (k *memKV) Create(ctx context.Context, key string, val []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return k.write(key, val, 0, jetstream.KeyValuePut)
}

func (k *memKV) Update(_ context.Context, key string, val []byte, last uint64) (uint64, error) {
	return k.write(key, val, last, jetstream.KeyValuePut)
}

func (k *memKV) Delete(_ context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	k.mu.Lock()
	last := k.vals[key].rev
	k.mu.Unlock()
	_, err := k.write(key, nil, last, jetstream.KeyValueDelete)
	return err
}

func (k *memKV) write(key string, val []byte, last uint64, op jetstream.KeyValueOp) (uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cur, ok := k.vals[key]
	if live := ok && cur.op == jetstream.KeyValuePut; live && cur.rev != last || !live && last != 0 && op == jetstream.KeyValuePut {
		return 0, jetstream.ErrKeyExists
	}
	k.rev++
	k.writes++
	e := memEntry{key: key, val: val, rev: k.rev, op: op}
	k.vals[key] = e
	for _, w := range k.watchers {
		if w.matches(key) {
			w.ch <- e
		}
	}
	if after := k.after; after != nil {
		k.mu.Unlock()
		after(key)
		k.mu.Lock()
	}
	return e.rev, nil
}

// machine is two routers' Stores over one memKV, with their live
// requests recorded.
type machine struct {
	kv   *memKV
	live *liveLog
	a, b *Store
}

func newMachine(t *testing.T) *machine {
	t.Helper()
	m := &machine{kv: newMemKV(), live: &liveLog{}}
	st := &store.Store{Parked: &store.KV{KeyValue: m.kv}}
	for i, owner := range []string{"router-a", "router-b"} {
		s := New(st, subj, Config{TTL: ttl, Owner: owner, Source: source, Publish: m.live.publish})
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		testkit.Stop(t, s.Stop)
		if i == 0 {
			m.a = s
		} else {
			m.b = s
		}
	}
	return m
}

// held is the subjects of the requests followers of tool deploy's
// external calls and confirmations get from the records (docs/protocol.md
// 6.2): what is still open.
func (m *machine) held() []string {
	m.kv.mu.Lock()
	defer m.kv.mu.Unlock()
	var out []string
	for _, e := range m.kv.vals {
		for _, kind := range []string{bus.KindExternal, bus.KindConfirm} {
			if msg, ok := Request(e.val, Want{Kind: kind, Tool: "deploy"}, subj, source); ok {
				out = append(out, msg.Subject)
			}
		}
	}
	return out
}

// park parks the calls ids of tool deploy as kind, in a batch of those
// calls alone (alone: nothing else of the run runs).
func (m *machine) park(t *testing.T, reply, kind string, alone bool, ids ...string) Parking {
	t.Helper()
	b := &Batch{Session: "s1", ReplyID: reply}
	var recs []*Record
	for _, id := range ids {
		r := record("s1", reply, id)
		r.Kind = kind
		recs = append(recs, r)
		b.Data.Calls = append(b.Data.Calls, r.Call)
	}
	got, err := m.a.Park(t.Context(), Run{Batch: b, Calls: recs, Results: map[string]bus.Result{}, Next: len(ids), Alone: alone})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func verdict(v Verdict, res bus.Result) Decide {
	return func(*Record, *bus.Answer) (Verdict, bus.Result, error) { return v, res, nil }
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != code {
		t.Fatalf("err %v, want %s", err, code)
	}
}

func status(t *testing.T, s *Store, key string) bus.ParkStatus {
	t.Helper()
	r, err := s.Read.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// TestMachine walks every transition of a parked call and of its batch's
// continuation, and tries every illegal one, on two routers over one
// in-memory P_parked, under testing/synctest: the lease times run on the
// bubble's clock.
func TestMachine(t *testing.T) {
	yes := true
	t.Run("park, answer done, resume", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			p := m.park(t, "r1", bus.KindExternal, true, "c1")
			if p.Batch.Phase != PhaseParked || len(p.Parked) != 1 {
				t.Fatalf("park: %+v", p)
			}
			key := p.Parked[0].Key()
			if again := m.park(t, "r1", bus.KindExternal, true, "c1"); !again.Before || again.Batch == nil {
				t.Fatalf("a re-sent batch parked again: %+v", again)
			}
			if err := m.a.calls.park(t.Context(), record("s1", "r1", "c1")); err == nil {
				t.Fatal("a call parked twice")
			}
			_, err := m.b.Answer(t.Context(), key, "other", &bus.Answer{}, verdict(Done, ok("c1")))
			wantCode(t, err, bus.CodeNotParked) // another tool's call
			_, err = m.b.Answer(t.Context(), key, "deploy", &bus.Answer{}, func(*Record, *bus.Answer) (Verdict, bus.Result, error) {
				return 0, bus.Result{}, bus.Errorf(bus.CodeBadRequest, "no")
			})
			wantCode(t, err, bus.CodeBadRequest)
			if status(t, m.a, key) != bus.ParkParked {
				t.Fatal("a refused answer changed the record")
			}
			before := m.kv.writes
			got, err := m.b.Answer(t.Context(), key, "deploy", &bus.Answer{State: bus.StateSuccess}, verdict(Done, ok("c1")))
			if err != nil || got.Record.Status != bus.ParkDone || got.Record.Result == nil || m.kv.writes != before+1 {
				t.Fatalf("answer: %+v %v, %d writes", got.Record, err, m.kv.writes-before)
			}
			if len(m.held()) != 0 {
				t.Fatalf("the answered call's request stays: %v", m.held())
			}
			_, err = m.a.Answer(t.Context(), key, "deploy", &bus.Answer{}, verdict(Done, ok("c1")))
			wantCode(t, err, bus.CodeAlreadyAnswered)
			if n := m.a.Expire(t.Context(), time.Now().Add(2*ttl)); len(n) != 0 {
				t.Fatal("a done call expired")
			}
			if _, err := m.a.calls.end(t.Context(), key, bus.ParkAnswered, bus.ParkDone, ok("c1")); err == nil {
				t.Fatal("a done call closed")
			}
			reported := false
			cont, resume, err := m.b.Resume(t.Context(), got.Record, *got.Record.Result, func(*Batch) { reported = true })
			if err != nil || !resume || !reported || cont.Phase != PhaseResumed || cont.Owner != "router-b" {
				t.Fatalf("resume: %+v %v %v %v", cont, resume, reported, err)
			}
			if err := m.b.Finish(t.Context(), cont); err != nil {
				t.Fatal(err)
			}
			if _, err := m.a.Read.Batch(t.Context(), "s1", "r1"); !store.IsNotFound(err) {
				t.Fatalf("continuation after finish: %v", err)
			}
		})
	})
	t.Run("carried: one write to park, none to resume", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			p := m.park(t, "r1", bus.KindExternal, true, "c1")
			key := p.Parked[0].Key()
			if m.kv.writes != 1 || len(p.Parked[0].Batch) == 0 {
				t.Fatalf("park: %d writes, record batch %s", m.kv.writes, p.Parked[0].Batch)
			}
			if _, err := m.a.Read.Batch(t.Context(), "s1", "r1"); !store.IsNotFound(err) {
				t.Fatalf("a carried batch has a key of its own: %v", err)
			}
			rec, _ := m.b.Read.Get(t.Context(), key)
			if cont, err := m.b.Read.Continuation(t.Context(), rec); err != nil || cont.Key() != "s1.r1" || len(cont.Waiting) != 1 {
				t.Fatalf("continuation of the record: %+v %v", cont, err)
			}
			// A parked record resumes nothing: only the transition that
			// ended it may.
			_, _, err := m.b.Resume(t.Context(), rec, ok("c1"), func(*Batch) { t.Fatal("reported a parked call") })
			wantCode(t, err, bus.CodeNotParked)
			// A copy re-sent while another call of it still ran (not
			// alone) finds the carried batch, and leaves nothing behind.
			if again := m.park(t, "r1", bus.KindExternal, false, "c1"); !again.Before || again.Batch == nil || again.Batch.Waiting[0] != "c1" {
				t.Fatalf("a re-sent copy parked again: %+v", again)
			}
			if _, err := m.a.Read.Batch(t.Context(), "s1", "r1"); !store.IsNotFound(err) {
				t.Fatalf("the re-sent copy's continuation stays: %v", err)
			}
			got, err := m.a.Answer(t.Context(), key, "deploy", &bus.Answer{State: bus.StateSuccess}, verdict(Done, ok("c1")))
			if err != nil {
				t.Fatal(err)
			}
			before, reported := m.kv.writes, false
			cont, resume, err := m.a.Resume(t.Context(), got.Record, *got.Record.Result, func(*Batch) { reported = true })
			if err != nil || !resume || !reported || cont.Results["c1"].State != bus.StateSuccess || m.kv.writes != before {
				t.Fatalf("resume: %+v %v %v %v, %d writes", cont, resume, reported, err, m.kv.writes-before)
			}
			if err := m.a.Finish(t.Context(), cont); err != nil || m.kv.writes != before {
				t.Fatalf("finish: %v, %d writes", err, m.kv.writes-before)
			}
		})
	})
	t.Run("carried: expired, cancelled, confirmed and taken over", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			k1 := m.park(t, "r1", bus.KindExternal, true, "c1").Parked[0].Key()
			k2 := m.park(t, "r2", bus.KindExternal, true, "c2").Parked[0].Key()
			k3 := m.park(t, "r3", bus.KindConfirm, true, "c3").Parked[0].Key()
			synctest.Wait() // router-b's cache has them
			ended, err := m.b.Cancel(t.Context(), "s1", "r2", nil)
			if err != nil || len(ended) != 1 || ended[0].Key() != k2 {
				t.Fatalf("cancel: %+v %v", ended, err)
			}
			if cont, resume, err := m.b.Resume(t.Context(), ended[0], *ended[0].Result, func(*Batch) {}); err != nil || !resume || cont.Key() != "s1.r2" {
				t.Fatalf("resume after cancel: %v %v", resume, err)
			}
			got, err := m.a.Answer(t.Context(), k3, "deploy", &bus.Answer{Confirmed: &yes}, verdict(Confirmed, bus.Result{}))
			if err != nil || got.Record.Status != bus.ParkAnswered {
				t.Fatalf("confirm: %+v %v", got.Record, err)
			}
			time.Sleep(ttl + time.Second) // c1 expires; router-a stops renewing c3
			expired := m.b.Expire(t.Context(), time.Now())
			if len(expired) != 1 || expired[0].Key() != k1 {
				t.Fatalf("expire: %+v", expired)
			}
			if _, resume, err := m.b.Resume(t.Context(), expired[0], *expired[0].Result, func(*Batch) {}); err != nil || !resume {
				t.Fatalf("resume after expiry: %v %v", resume, err)
			}
			_, taken := m.b.TakeOver(t.Context(), time.Now().Add(-time.Second))
			if len(taken) != 1 || taken[0].Key() != k3 {
				t.Fatalf("takeover: %+v", taken)
			}
			if cont, err := m.b.Read.Continuation(t.Context(), taken[0]); err != nil || cont.Key() != "s1.r3" {
				t.Fatalf("continuation of a taken-over answer: %v", err)
			}
			cont, resume, err := m.b.Resume(t.Context(), taken[0], ok("c3"), func(*Batch) {})
			if err != nil || !resume || cont.Owner != "router-b" {
				t.Fatalf("resume after takeover: %+v %v %v", cont, resume, err)
			}
			// The router that lost the answer, finishing late, resumes
			// nothing.
			_, _, err = m.a.Resume(t.Context(), got.Record, ok("c3"), func(*Batch) { t.Fatal("reported twice") })
			wantCode(t, err, bus.CodeNotParked)
		})
	})
	t.Run("alone, two calls: the last result finishes the batch with no write; Finish deletes the continuation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			p := m.park(t, "r1", bus.KindExternal, true, "c1", "c2")
			if p.Batch.Phase != PhaseParked || m.kv.writes != 3 {
				t.Fatalf("park: %+v, %d writes", p.Batch, m.kv.writes)
			}
			var recs []*Record
			for _, r := range p.Parked {
				got, err := m.b.Answer(t.Context(), r.Key(), "deploy", &bus.Answer{State: bus.StateSuccess}, verdict(Done, ok(r.Call.ID)))
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, got.Record)
			}
			if _, resume, err := m.b.Resume(t.Context(), recs[0], ok("c1"), func(*Batch) {}); err != nil || resume {
				t.Fatalf("first result: %v %v", resume, err)
			}
			writes := m.kv.writes
			cont, resume, err := m.a.Resume(t.Context(), recs[1], ok("c2"), func(*Batch) {})
			if err != nil || !resume || len(cont.Results) != 2 || m.kv.writes != writes {
				t.Fatalf("last result: %+v %v %v, %d writes", cont, resume, err, m.kv.writes-writes)
			}
			// Until its batch.done is out the continuation waits, without
			// the last result: the mends of a router that stops now.
			if b, err := m.a.Read.Batch(t.Context(), "s1", "r1"); err != nil || !b.lacks("c2") {
				t.Fatalf("continuation before Finish: %+v %v", b, err)
			}
			if err := m.a.Finish(t.Context(), cont); err != nil {
				t.Fatal(err)
			}
			if _, err := m.a.Read.Batch(t.Context(), "s1", "r1"); !store.IsNotFound(err) {
				t.Fatalf("continuation after Finish: %v", err)
			}
		})
	})
	t.Run("confirmed runs under a lease; taken over when stale", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			p := m.park(t, "r1", bus.KindConfirm, false, "c1", "c2")
			if p.Batch.Phase != PhaseRunning {
				t.Fatalf("park: %+v", p)
			}
			if _, resume, err := m.a.Settle(t.Context(), "s1", "r1", nil); err != nil || resume {
				t.Fatalf("settle: %v %v", resume, err)
			}
			k1, k2 := p.Parked[0].Key(), p.Parked[1].Key()
			got, err := m.a.Answer(t.Context(), k1, "deploy", &bus.Answer{Confirmed: &yes}, verdict(Confirmed, bus.Result{}))
			if err != nil || got.Record.Status != bus.ParkAnswered || got.Record.Owner != "router-a" {
				t.Fatalf("answer: %+v %v", got.Record, err)
			}
			_, err = m.b.Answer(t.Context(), k1, "deploy", &bus.Answer{Confirmed: &yes}, verdict(Confirmed, bus.Result{}))
			wantCode(t, err, bus.CodeAlreadyAnswered)
			_, err = m.b.calls.end(t.Context(), k1, bus.ParkParked, bus.ParkExpired, ok("c1"))
			wantCode(t, err, bus.CodeAlreadyAnswered) // an answered call does not expire
			// A fresh lease is not taken over; a stale one is, once.
			if _, recs := m.b.TakeOver(t.Context(), time.Now().Add(-time.Second)); len(recs) != 0 {
				t.Fatal("a fresh answer was taken over")
			}
			time.Sleep(time.Minute) // router-a stops renewing
			_, recs := m.b.TakeOver(t.Context(), time.Now().Add(-time.Second))
			if len(recs) != 1 || recs[0].Owner != "router-b" {
				t.Fatalf("takeover: %+v", recs)
			}
			if _, again := m.b.TakeOver(t.Context(), time.Now().Add(-2*time.Minute)); len(again) != 0 {
				t.Fatal("taken over twice")
			}
			_, resume, err := m.b.Resume(t.Context(), recs[0], ok("c1"), func(*Batch) {})
			if err != nil || resume {
				t.Fatalf("first result resumed: %v %v", resume, err)
			}
			// The router that lost its lease, finishing late, records and
			// reports nothing.
			_, _, err = m.a.Resume(t.Context(), got.Record, ok("c1"), func(*Batch) { t.Fatal("reported twice") })
			wantCode(t, err, bus.CodeNotParked)
			if status(t, m.a, k1) != bus.ParkDone {
				t.Fatal("not done")
			}
			ended, err := m.a.Cancel(t.Context(), "s1", "r1", []string{"c2"})
			if err != nil || len(ended) != 1 || ended[0].Status != bus.ParkCancelled || ended[0].Result.Error.Code != bus.CodeInterrupted {
				t.Fatalf("cancel: %+v %v", ended, err)
			}
			_, err = m.b.Answer(t.Context(), k2, "deploy", &bus.Answer{Confirmed: &yes}, verdict(Confirmed, bus.Result{}))
			wantCode(t, err, bus.CodeNotParked)
			cont, resume, err := m.a.Resume(t.Context(), ended[0], *ended[0].Result, func(*Batch) {})
			if err != nil || !resume || !cont.IsCancelled("c2") {
				t.Fatalf("last result: %+v %v %v", cont, resume, err)
			}
			if err := m.a.Finish(t.Context(), cont); err != nil {
				t.Fatal(err)
			}
			if _, again, _ := m.b.Resume(t.Context(), ended[0], *ended[0].Result, func(*Batch) {}); again {
				t.Fatal("a finished batch resumed again")
			}
		})
	})
	t.Run("repark, then expire", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			p := m.park(t, "r1", bus.KindConfirm, true, "c1")
			key := p.Parked[0].Key()
			got, err := m.a.Answer(t.Context(), key, "deploy", &bus.Answer{Confirmed: &yes}, verdict(Repark, bus.Result{}))
			if err != nil || got.Record.Status != bus.ParkParked || got.Record.Kind != bus.KindExternal {
				t.Fatalf("repark: %+v %v", got.Record, err)
			}
			if held := m.held(); len(held) != 1 || held[0] != "toolbus.external.deploy" {
				t.Fatalf("handoff after repark: %v", held)
			}
			if n := m.b.Expire(t.Context(), time.Now()); len(n) != 0 {
				t.Fatal("expired before its time")
			}
			time.Sleep(ttl + time.Second)
			ended := m.b.Expire(t.Context(), time.Now())
			if len(ended) != 1 || ended[0].Status != bus.ParkExpired || ended[0].Result.Error.Code != bus.CodeTimeout {
				t.Fatalf("expire: %+v", ended)
			}
			if again := m.a.Expire(t.Context(), time.Now()); len(again) != 0 {
				t.Fatal("expired twice")
			}
			_, err = m.a.Answer(t.Context(), key, "deploy", &bus.Answer{}, verdict(Done, ok("c1")))
			wantCode(t, err, bus.CodeNotParked)
			if len(m.held()) != 0 {
				t.Fatalf("the expired call's request stays: %v", m.held())
			}
		})
	})
	t.Run("continuation lease: taken over when stale, not when renewed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			m.park(t, "r1", bus.KindExternal, false, "c1")
			time.Sleep(time.Minute)
			if err := m.a.Renew(t.Context(), time.Now()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the watches have the renewal
			if conts, _ := m.b.TakeOver(t.Context(), time.Now().Add(-time.Second)); len(conts) != 0 {
				t.Fatal("a renewed continuation was taken over")
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			conts, _ := m.b.TakeOver(t.Context(), time.Now().Add(-time.Second))
			if len(conts) != 1 || conts[0].Owner != "router-b" || conts[0].Phase != PhaseResumed {
				t.Fatalf("takeover: %+v", conts)
			}
			if err := m.a.Renew(t.Context(), time.Now()); err != nil {
				t.Fatal(err)
			}
			if got, _ := m.a.Read.Batch(t.Context(), "s1", "r1"); got.Owner != "router-b" {
				t.Fatal("the old owner renewed a lease it lost")
			}
			if _, _, err := m.a.Settle(t.Context(), "s1", "r1", nil); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("a run whose continuation was taken over does not resume it too", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t)
			p := m.park(t, "r1", bus.KindExternal, false, "c1") // router-a's run goes on
			got, err := m.b.Answer(t.Context(), p.Parked[0].Key(), "deploy", &bus.Answer{State: bus.StateSuccess}, verdict(Done, ok("c1")))
			if err != nil {
				t.Fatal(err)
			}
			if _, resume, err := m.b.Resume(t.Context(), got.Record, *got.Record.Result, func(*Batch) {}); err != nil || resume {
				t.Fatalf("a running batch resumed by an answer: %v %v", resume, err)
			}
			time.Sleep(time.Minute) // router-a's lease lapses while its run goes on
			synctest.Wait()
			if conts, _ := m.b.TakeOver(t.Context(), time.Now().Add(-time.Second)); len(conts) != 1 {
				t.Fatalf("takeover: %+v", conts)
			}
			// router-a's run ends late: its results join the batch, which is
			// router-b's to settle (docs/protocol.md 6.1), not resumed twice.
			late, resume, err := m.a.Settle(t.Context(), "s1", "r1", map[string]bus.Result{"x": ok("x")})
			if err != nil || resume || late.Owner != "router-b" || late.Phase != PhaseResumed || late.Results["x"].ID != "x" {
				t.Fatalf("the old owner's settle: resume %v, %+v, %v", resume, late, err)
			}
			if _, resume, err := m.b.Settle(t.Context(), "s1", "r1", nil); err != nil || !resume {
				t.Fatalf("the new owner's settle: resume %v, %v", resume, err)
			}
		})
	})
}

// TestAnswerVerdicts: each verdict is one compare-and-set on the record,
// a repark too (the record is the new request), and followers of the
// handoff see only what is still open.
func TestAnswerVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    string
		verdict Verdict
		status  bus.ParkStatus
		writes  int
		held    []string
		lease   bool
	}{
		{"external result: done", bus.KindExternal, Done, bus.ParkDone, 1, nil, false},
		{"denial: done", bus.KindConfirm, Done, bus.ParkDone, 1, nil, false},
		{"confirmed external tool: parked again", bus.KindConfirm, Repark, bus.ParkParked, 1, []string{"toolbus.external.deploy"}, false},
		{"confirmed: answered, leased", bus.KindConfirm, Confirmed, bus.ParkAnswered, 1, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMachine(t)
				key := m.park(t, "r1", tc.kind, true, "c1").Parked[0].Key()
				before := m.kv.writes
				got, err := m.a.Answer(t.Context(), key, "deploy", &bus.Answer{}, verdict(tc.verdict, ok("c1")))
				if err != nil || got.Verdict != tc.verdict || got.Record.Status != tc.status {
					t.Fatalf("answer: %+v %v", got, err)
				}
				if n := m.kv.writes - before; n != tc.writes {
					t.Errorf("%d writes, want %d", n, tc.writes)
				}
				if held := m.held(); len(held) != len(tc.held) || len(held) == 1 && held[0] != tc.held[0] {
					t.Errorf("handoff holds %v, want %v", held, tc.held)
				}
				if m.a.calls.leases.holds(callKey(key)) != tc.lease {
					t.Errorf("lease held %v, want %v", !tc.lease, tc.lease)
				}
			})
		})
	}
}

// TestLoneRunMovedOn: a lone run (Alone) writes its continuation waiting
// for answers before its calls' records; a call that then fails to park
// (here: a cancel forestalled it) takes the run back to running. Between
// the two writes another router may answer the parked call and mend the
// forestalled one's result in (Mends.Mend), which resumes the batch, and
// finish it. The run then writes nothing and stops (ErrNotOwner): it
// neither takes the resumed batch back nor brings a finished one back.
func TestLoneRunMovedOn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		moveOn  bool // router-b resumes the batch between the writes
		finish  bool // and finishes it
		wantErr bool
	}{
		{"still waiting: the run runs again", false, false, false},
		{"resumed by another router", true, false, true},
		{"finished by another router", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMachine(t)
				c1, c2 := record("s1", "r1", "c1"), record("s1", "r1", "c2")
				c1.Kind, c2.Kind = bus.KindExternal, bus.KindExternal
				cancelled := bus.ErrorResult(c2.Call, bus.CodeInterrupted, bus.InterruptedText)
				if err := m.b.Cancels.Forestall(t.Context(), "s1", "r1", c2.Call, cancelled); err != nil {
					t.Fatal(err)
				}
				fired := false
				m.kv.after = func(key string) {
					if !tc.moveOn || fired || key != c1.Key() {
						return
					}
					fired = true
					got := answerDone(t, m.b, key)
					if _, resume, err := m.b.Resume(t.Context(), got, *got.Result, func(*Batch) {}); err != nil || resume {
						t.Fatalf("resume: %v %v", resume, err)
					}
					rec, err := m.b.Read.Get(t.Context(), c2.Key())
					if err != nil {
						t.Fatal(err)
					}
					cont, resume, err := m.b.Mends.Mend(t.Context(), rec, *rec.Result, func(*Batch) {})
					if err != nil || !resume {
						t.Fatalf("mend: %v %v", resume, err)
					}
					if tc.finish {
						if err := m.b.Finish(t.Context(), cont); err != nil {
							t.Fatal(err)
						}
					}
				}
				b := &Batch{Session: "s1", ReplyID: "r1", Data: bus.Batch{Calls: []bus.Call{c1.Call, c2.Call}}}
				got, err := m.a.Park(t.Context(), Run{Batch: b, Calls: []*Record{c1, c2}, Results: map[string]bus.Result{}, Next: 2, Alone: true})
				m.kv.mu.Lock()
				m.kv.after = nil
				m.kv.mu.Unlock()
				if !errors.Is(got.Failed["c2"], errCancelledFirst) {
					t.Fatalf("c2 did not fail to park: %+v", got.Failed)
				}
				cont, rerr := m.a.Read.Batch(t.Context(), "s1", "r1")
				switch {
				case !tc.wantErr:
					if err != nil || got.Batch.Phase != PhaseRunning || got.Batch.Owner != "router-a" || rerr != nil || cont.Owner != "router-a" {
						t.Fatalf("park: %+v %v; stored %+v %v", got.Batch, err, cont, rerr)
					}
				case !errors.Is(err, ErrNotOwner):
					t.Fatalf("park on a batch moved on: %v, want ErrNotOwner", err)
				case tc.finish:
					if !store.IsNotFound(rerr) {
						t.Fatalf("a finished batch came back: %+v %v", cont, rerr)
					}
				case rerr != nil || cont.Phase != PhaseResumed || cont.Owner != "router-b":
					t.Fatalf("the resumed batch was taken back: %+v %v", cont, rerr)
				}
				if tc.moveOn && m.a.conts.leases.holds(batchKey("s1.r1")) {
					t.Fatal("router-a holds the lease of a batch that is not its")
				}
			})
		})
	}
}
