package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

func TestStale(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lease := 3 * time.Second
	far := t0.Add(time.Hour)
	for _, tc := range []struct {
		name  string
		le    Entry
		now   time.Time
		seen  time.Time
		stale bool
	}{
		{"fresh lease", Entry{Touched: t0, Deadline: far}, t0.Add(time.Second), t0, false},
		{"lease at its end", Entry{Touched: t0, Deadline: far}, t0.Add(lease), t0.Add(lease), false},
		{"lease past its end", Entry{Touched: t0, Deadline: far}, t0.Add(lease + time.Millisecond), t0.Add(lease), true},
		{"owner's clock ahead, not seen changing", Entry{Touched: t0.Add(time.Minute), Deadline: far}, t0.Add(lease + time.Second), t0, true},
		{"owner's clock ahead, seen changing", Entry{Touched: t0.Add(time.Minute), Deadline: far}, t0.Add(lease + time.Second), t0.Add(lease), false},
		{"no lease, before the deadline and grace", Entry{Deadline: t0}, t0.Add(grace), t0, false},
		{"no lease, past the deadline and grace", Entry{Deadline: t0}, t0.Add(grace + time.Millisecond), t0, true},
		{"lease renewed, past the deadline and grace", Entry{Touched: t0.Add(time.Hour), Deadline: t0}, t0.Add(time.Hour), t0.Add(time.Hour), true},
	} {
		if got := stale(tc.le, tc.now, tc.seen, lease); got != tc.stale {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.stale)
		}
	}
}

// A claim whose router stops renewing its lease (it died): every re-send
// that waits for it is answered once the lease is past, one of them takes
// the claim over and records unknown_outcome, every other gets that same
// result, and the dead router's late record gives way to it.
func TestLedgerLeaseLapses(t *testing.T) {
	const lease = 300 * time.Millisecond
	ls := newTestLedgerLease(t, lease, "dead", "b", "c")
	ctx := t.Context()
	how, claim := ls[0].claim(ctx, "s.r.c1", time.Hour, time.Time{}, digests{})
	if how != claimed {
		t.Fatal(how)
	}
	start := time.Now()
	var wg sync.WaitGroup
	got := make([]bus.Result, 4)
	for i := range got {
		wg.Go(func() {
			got[i], _ = ls[1+i%2].wait(ctx, Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Hour})
		})
	}
	wg.Wait()
	took := time.Since(start)
	for i, r := range got {
		if r.Error == nil || r.Error.Code != bus.CodeUnknownOutcome {
			t.Fatalf("re-send %d: %+v", i, r)
		}
	}
	if took > lease+5*time.Second {
		t.Errorf("re-sends answered %v after the claim, lease %v", took, lease)
	}
	t.Logf("answered %v after the claim (lease %v)", took, lease)
	res, landed := ls[0].Record(t.Context(), "s.r.c1", claim, bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("late")})
	if res.Error == nil || res.Error.Code != bus.CodeUnknownOutcome || !landed {
		t.Fatalf("the dead router's late record: %+v, landed %v (the takeover's record is in the ledger)", res, landed)
	}
	e, err := ls[0].kv.Get(ctx, "s.r.c1")
	if err != nil {
		t.Fatal(err)
	}
	var le Entry
	if err := json.Unmarshal(e.Value(), &le); err != nil || le.State != stateDone || le.Result.Error.Code != bus.CodeUnknownOutcome {
		t.Fatalf("the entry after the takeover: %s", e.Value())
	}
}

// A claim whose router renews its lease is waited for however long the
// run takes; the re-send gets the recorded result. A lease of 1 s, renewed
// every third of it: at 300 ms a renewal late by 200 ms on a loaded machine
// made the waiter give up (2 runs of 30 beside a CPU burner).
func TestLedgerLeaseRenewed(t *testing.T) {
	const lease = time.Second
	ls := newTestLedgerLease(t, lease, "a", "b")
	ctx := t.Context()
	_, claim := ls[0].claim(ctx, "s.r.c1", time.Hour, time.Time{}, digests{})
	got := make(chan bus.Result, 1)
	go func() {
		r, _ := ls[1].wait(ctx, Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Hour})
		got <- r
	}()
	// Renew for four leases, by the clock: the waiter must not give up.
	until := time.Now().Add(4 * lease)
	tick := time.NewTicker(lease / 3)
	for now := range tick.C {
		if now.After(until) {
			break
		}
		if err := ls[0].Renew(ctx, now); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			t.Fatalf("the re-send gave up on a renewed claim: %+v", r)
		default:
		}
	}
	tick.Stop()
	ls[0].Record(t.Context(), "s.r.c1", claim, bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")})
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		select {
		case r := <-got:
			if textOf(r.Output) != "done" {
				t.Fatalf("waited for %+v", r)
			}
			return nil
		default:
			return context.DeadlineExceeded
		}
	})
}

// An idempotent call with attempts left is run again by the re-send that
// takes a dead router's claim over; the other re-sends wait for that run.
func TestLedgerLeaseRetry(t *testing.T) {
	const lease = 300 * time.Millisecond
	ls := newTestLedgerLease(t, lease, "dead", "b", "c")
	ctx := t.Context()
	_, _ = ls[0].claim(ctx, "s.r.c1", time.Hour, time.Time{}, digests{})
	w := Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Hour, Retry: true}
	type out struct {
		res   bus.Result
		claim *Entry
	}
	outs := make(chan out, 2)
	for _, l := range ls[1:] {
		go func() {
			r, c := l.wait(ctx, w)
			outs <- out{r, c}
		}()
	}
	first := <-outs
	if first.claim == nil {
		t.Fatalf("no re-send took the claim over to run again: %+v", first.res)
	}
	var runner *Ledger
	for _, l := range ls[1:] {
		if l.cfg.Router == first.claim.Router {
			runner = l
		}
	}
	runner.Record(t.Context(), "s.r.c1", *first.claim, bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("rerun")})
	second := <-outs
	if second.claim != nil || textOf(second.res.Output) != "rerun" {
		t.Fatalf("the other re-send: %+v %+v", second.res, second.claim)
	}
}

// A re-send whose expirytime comes while the first run (its router alive)
// goes on is answered at its expirytime with the timeout.
func TestLedgerWaitExpiry(t *testing.T) {
	ls := newTestLedgerLease(t, time.Hour, "a", "b")
	ctx := t.Context()
	_, _ = ls[0].claim(ctx, "s.r.c1", time.Hour, time.Time{}, digests{})
	start := time.Now()
	r, _ := ls[1].wait(ctx, Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Hour, Expiry: start.Add(200 * time.Millisecond)})
	if r.Error == nil || r.Error.Code != bus.CodeTimeout {
		t.Fatalf("at the expirytime: %+v", r)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 5*time.Second {
		t.Fatalf("answered after %v, the expirytime was 200ms away", took)
	}
}

// fakeKV is the one ledger key of the timer tests: Get, Watch (the current
// value, then every put) and compare-and-set Update, in memory, so that
// testing/synctest's fake clock runs the waits.
type fakeKV struct {
	jetstream.KeyValue // the methods the ledger does not use: nil, they panic
	mu                 sync.Mutex
	val                []byte
	rev                uint64
	watchers           []chan jetstream.KeyValueEntry
	refuse             error  // when set, every write fails with it
	stops              int    // watches stopped
	updates            int    // compare-and-sets tried (a create is one)
	conflicts          int    // compare-and-sets refused: the revision moved on
	beforeUpdate       func() // when set, called (once) before the next compare-and-set
	afterGet           func() // when set, called (once) after the next Get read the value
	muted              bool   // watches get nothing: the puts wait in backlog (flush)
	backlog            []fakeEntry
}

// flush ends muted and gives the watches the puts they missed, in order.
func (k *fakeKV) flush() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.backlog {
		for _, ch := range k.watchers {
			select {
			case ch <- e:
			default:
			}
		}
	}
	k.muted, k.backlog = false, nil
}

type fakeEntry struct {
	key string
	val []byte
	rev uint64
}

func (e fakeEntry) Bucket() string                  { return "fake" }
func (e fakeEntry) Key() string                     { return e.key }
func (e fakeEntry) Value() []byte                   { return e.val }
func (e fakeEntry) Revision() uint64                { return e.rev }
func (e fakeEntry) Created() time.Time              { return time.Now() }
func (e fakeEntry) Delta() uint64                   { return 0 }
func (e fakeEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

type fakeWatch struct {
	ch chan jetstream.KeyValueEntry
	k  *fakeKV
}

func (w fakeWatch) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w fakeWatch) Stop() error {
	w.k.mu.Lock()
	w.k.stops++
	w.k.mu.Unlock()
	return nil
}

func (k *fakeKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	k.mu.Lock()
	e, hook := fakeEntry{key, k.val, k.rev}, k.afterGet
	k.afterGet = nil
	k.mu.Unlock()
	if hook != nil {
		hook()
	}
	if e.rev == 0 {
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

func (k *fakeKV) Watch(_ context.Context, key string, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch := make(chan jetstream.KeyValueEntry, 64)
	if k.rev != 0 {
		ch <- fakeEntry{key, k.val, k.rev}
	}
	k.watchers = append(k.watchers, ch)
	return fakeWatch{ch, k}, nil
}

func (k *fakeKV) Create(ctx context.Context, key string, val []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return k.Update(ctx, key, val, 0)
}

func (k *fakeKV) Update(_ context.Context, key string, val []byte, last uint64) (uint64, error) {
	k.mu.Lock()
	hook := k.beforeUpdate
	k.beforeUpdate = nil
	k.mu.Unlock()
	if hook != nil {
		hook()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.updates++
	if k.refuse != nil {
		return 0, k.refuse
	}
	if last != k.rev {
		k.conflicts++
		return 0, jetstream.ErrKeyExists
	}
	k.rev++
	k.val = val
	if k.muted {
		k.backlog = append(k.backlog, fakeEntry{key, val, k.rev})
		return k.rev, nil
	}
	for _, ch := range k.watchers {
		select {
		case ch <- fakeEntry{key, val, k.rev}:
		default:
		}
	}
	return k.rev, nil
}

// The lease's timers on the fake clock: a re-send is answered within a
// poll of the lease's end, measured from the last renewal, never before;
// a re-send with an expirytime inside the lease is answered exactly then.
func TestLedgerLeaseTimers(t *testing.T) {
	const hb = 5 * time.Second
	const lease = 3 * hb
	call := bus.Call{ID: "c1", Name: "t"}
	t.Run("dead router", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv := &fakeKV{}
			owner := New(kv, Config{Router: "dead", Lease: lease})
			waiter := New(kv, Config{Router: "b", Lease: lease})
			if how, _ := owner.claim(t.Context(), "k", time.Hour, time.Time{}, digests{}); how != claimed {
				t.Fatal(how)
			}
			// Two renewals, then the router dies.
			for range 2 {
				time.Sleep(hb)
				if err := owner.Renew(t.Context(), time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			died := time.Now()
			r, _ := waiter.wait(t.Context(), Call{Key: "k", Call: call, Timeout: time.Hour})
			took := time.Since(died)
			if r.Error == nil || r.Error.Code != bus.CodeUnknownOutcome {
				t.Fatalf("%+v", r)
			}
			if took <= lease || took > lease+pollEvery(lease) {
				t.Fatalf("answered %v after the last renewal; the lease is %v, the poll %v", took, lease, pollEvery(lease))
			}
		})
	})
	t.Run("dead router, store full", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv := &fakeKV{}
			owner := New(kv, Config{Router: "dead", Lease: lease})
			h := &store.Health{}
			waiter := New(kv, Config{Router: "b", Lease: lease, Health: h})
			owner.claim(t.Context(), "k", time.Hour, time.Time{}, digests{})
			kv.mu.Lock()
			kv.refuse = &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}
			kv.mu.Unlock()
			start := time.Now()
			r, _ := waiter.wait(t.Context(), Call{Key: "k", Call: call, Timeout: time.Hour})
			if r.Error == nil || r.Error.Code != bus.CodeUnknownOutcome || time.Since(start) > lease+pollEvery(lease) {
				t.Fatalf("after %v: %+v", time.Since(start), r)
			}
			if full, _, _ := h.Full(); !full {
				t.Fatal("the refused takeover did not mark the store full")
			}
		})
	})
	t.Run("expirytime inside the lease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv := &fakeKV{}
			owner := New(kv, Config{Router: "a", Lease: lease})
			waiter := New(kv, Config{Router: "b", Lease: lease})
			owner.claim(t.Context(), "k", time.Hour, time.Time{}, digests{})
			start := time.Now()
			r, _ := waiter.wait(t.Context(), Call{Key: "k", Call: call, Timeout: time.Hour, Expiry: start.Add(4 * time.Second)})
			if r.Error == nil || r.Error.Code != bus.CodeTimeout || time.Since(start) != 4*time.Second {
				t.Fatalf("after %v: %+v", time.Since(start), r)
			}
			if textOf(r.Output) != "Tool execution timeout after 4s" {
				t.Fatalf("text %q", textOf(r.Output))
			}
		})
	})
	t.Run("renewed for an hour", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv := &fakeKV{}
			owner := New(kv, Config{Router: "a", Lease: lease})
			waiter := New(kv, Config{Router: "b", Lease: lease})
			_, claim := owner.claim(t.Context(), "k", 2*time.Hour, time.Time{}, digests{})
			ctx, cancel := context.WithCancel(t.Context())
			go func() {
				tick := time.NewTicker(hb)
				defer tick.Stop()
				for i := 0; i < int(time.Hour/hb); i++ {
					now := <-tick.C
					_ = owner.Renew(ctx, now)
				}
				owner.Record(t.Context(), "k", claim, bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")})
				cancel()
			}()
			start := time.Now()
			r, _ := waiter.wait(t.Context(), Call{Key: "k", Call: call, Timeout: 2 * time.Hour})
			if textOf(r.Output) != "done" || time.Since(start) < time.Hour {
				t.Fatalf("after %v: %+v", time.Since(start), r)
			}
		})
	})
}

// One renewal renews every running claim the router holds, and lets go of
// those that moved on.
func TestLedgerRenewMany(t *testing.T) {
	ls := newTestLedgerLease(t, time.Second, "a", "b")
	ctx := t.Context()
	const n = 100
	for i := range n {
		if how, _ := ls[0].claim(ctx, fmt.Sprintf("s.r.c%d", i), time.Hour, time.Time{}, digests{}); how != claimed {
			t.Fatal(how)
		}
	}
	// Another router ends one of them (as a durable call's result, or a
	// takeover, would).
	e, err := ls[0].kv.Get(ctx, "s.r.c0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls[1].kv.Update(ctx, "s.r.c0", []byte(`{"state":"done","router":"b","claim":"other","deadline":"2030-01-01T00:00:00Z"}`), e.Revision()); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Minute).UTC()
	if err := ls[0].Renew(ctx, at); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		e, err := ls[0].kv.Get(ctx, fmt.Sprintf("s.r.c%d", i))
		if err != nil {
			t.Fatal(err)
		}
		var le Entry
		if err := json.Unmarshal(e.Value(), &le); err != nil || !le.Touched.Equal(at) || le.State != stateRunning {
			t.Fatalf("claim %d after the renewal: %s", i, e.Value())
		}
	}
	_, held := ls[0].held.all()["s.r.c0"]
	left := len(ls[0].held.all())
	if held || left != n-1 {
		t.Fatalf("held after the renewal: c0 %v, %d claims", held, left)
	}
}

// A record stores its claim's members as the claim has them last: as
// written, or with the lease a renewal wrote.
func TestLedgerRecordAfterRenew(t *testing.T) {
	l := newTestLedger(t, "a")[0]
	ctx := t.Context()
	res := bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")}
	for _, renew := range []bool{false, true} {
		key := fmt.Sprintf("s.r.renewed-%v", renew)
		_, claim := l.claim(ctx, key, time.Hour, time.Time{}, digests{"d", "c"})
		want := claim
		if renew {
			want.Touched = claim.Touched.Add(time.Second)
			if err := l.Renew(ctx, want.Touched); err != nil {
				t.Fatal(err)
			}
		}
		if _, landed := l.Record(ctx, key, claim, res); !landed {
			t.Fatal("not recorded")
		}
		e, err := l.kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want.State, want.Result = stateDone, &res
		if got := e.Value(); string(got) != string(encode(&want)) {
			t.Errorf("renewed %v: stored\n%s\nwant\n%s", renew, got, encode(&want))
		}
	}
}
