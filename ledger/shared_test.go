package ledger

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// counts reads the fake bucket's counters: watches opened and stopped,
// compare-and-sets tried.
func (k *fakeKV) counts() (opened, stopped, updates int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.watchers), k.stops, k.updates
}

func (k *fakeKV) entry(t *testing.T) Entry {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	var le Entry
	if err := json.Unmarshal(k.val, &le); err != nil {
		t.Fatal(err)
	}
	return le
}

// waiter is one duplicate's wait, run on its own goroutine.
type waiter struct {
	cancel context.CancelFunc
	out    chan waited
}

type waited struct {
	res   bus.Result
	claim *Entry
}

func startWait(t *testing.T, l *Ledger, c Call) waiter {
	ctx, cancel := context.WithCancel(t.Context())
	w := waiter{cancel: cancel, out: make(chan waited, 1)}
	go func() {
		r, claim := l.wait(ctx, c)
		w.out <- waited{r, claim}
	}()
	return w
}

// got returns the waiter's outcome; it must have one (synctest.Wait first).
func (w waiter) got(t *testing.T) waited {
	t.Helper()
	select {
	case o := <-w.out:
		return o
	default:
		t.Fatal("the waiter has no outcome")
		return waited{}
	}
}

func (w waiter) waiting(t *testing.T) {
	t.Helper()
	select {
	case o := <-w.out:
		t.Fatalf("the waiter returned %+v", o.res)
	default:
	}
}

func codeOf(r bus.Result) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

// The duplicates of one key waiting on one router share one wait (one
// watch, one takeover), each with its own context and expiry, on the fake
// clock (testing/synctest): no sleeps but the fake clock's.
func TestSharedWait(t *testing.T) {
	const lease = 15 * time.Second
	call := bus.Call{ID: "c1", Name: "t"}
	c := Call{Key: "k", Call: call, Timeout: time.Hour}
	done := bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")}
	setup := func(t *testing.T) (*fakeKV, *Ledger, *Ledger, Entry) {
		kv := &fakeKV{}
		owner := New(kv, Config{Router: "a", Lease: lease})
		l := New(kv, Config{Router: "b", Lease: lease})
		how, claim := owner.claim(t.Context(), "k", time.Hour, time.Time{}, digests{})
		if how != claimed {
			t.Fatal(how)
		}
		return kv, owner, l, claim
	}

	t.Run("own deadlines; one leaves early; the result reaches the others", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv, owner, l, claim := setup(t)
			start := time.Now()
			soon := c
			soon.Expiry = start.Add(2 * time.Second)
			later := c
			later.Expiry = start.Add(time.Hour)
			early, leaving, stays, none := startWait(t, l, soon), startWait(t, l, later), startWait(t, l, later), startWait(t, l, c)
			synctest.Wait()
			if opened, _, _ := kv.counts(); opened != 1 {
				t.Fatalf("4 waiters opened %d watches, want 1", opened)
			}
			time.Sleep(2 * time.Second) // the fake clock: the first expiry
			synctest.Wait()
			if o := early.got(t); codeOf(o.res) != bus.CodeTimeout || textOf(o.res.Output) != "Tool execution timeout after 2s" {
				t.Fatalf("the waiter whose expiry came: %+v", o.res)
			}
			leaving.cancel()
			synctest.Wait()
			if o := leaving.got(t); codeOf(o.res) != bus.CodeInterrupted {
				t.Fatalf("the waiter that left: %+v", o.res)
			}
			stays.waiting(t)
			none.waiting(t)
			if _, stopped, _ := kv.counts(); stopped != 0 {
				t.Fatal("a waiter's leaving stopped the others' watch")
			}
			// Renewed leases for a while: the others wait on.
			for range 4 {
				time.Sleep(5 * time.Second)
				if err := owner.Renew(t.Context(), time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait()
			stays.waiting(t)
			owner.Record(t.Context(), "k", claim, done)
			synctest.Wait()
			for _, w := range []waiter{stays, none} {
				if o := w.got(t); textOf(o.res.Output) != "done" || o.claim != nil {
					t.Fatalf("a waiter after the record: %+v", o)
				}
			}
			if err := l.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if opened, stopped, _ := kv.counts(); opened != 1 || stopped != 1 {
				t.Fatalf("watches opened %d, stopped %d; want 1 and 1", opened, stopped)
			}
		})
	})

	t.Run("the last waiter leaves: the watch stops; a late joiner opens a new one", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv, owner, l, claim := setup(t)
			a, b := startWait(t, l, c), startWait(t, l, c)
			synctest.Wait()
			a.cancel()
			b.cancel()
			synctest.Wait()
			a.got(t)
			b.got(t)
			if err := l.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if opened, stopped, _ := kv.counts(); opened != 1 || stopped != 1 {
				t.Fatalf("after the last waiter left: watches opened %d, stopped %d; want 1 and 1", opened, stopped)
			}
			late := startWait(t, l, c)
			synctest.Wait()
			if opened, _, _ := kv.counts(); opened != 2 {
				t.Fatalf("the late joiner: %d watches opened, want 2", opened)
			}
			owner.Record(t.Context(), "k", claim, done)
			synctest.Wait()
			if o := late.got(t); textOf(o.res.Output) != "done" {
				t.Fatalf("the late joiner: %+v", o.res)
			}
			if err := l.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if opened, stopped, _ := kv.counts(); opened != 2 || stopped != 2 {
				t.Fatalf("watches opened %d, stopped %d; want 2 and 2", opened, stopped)
			}
		})
	})

	t.Run("a dead router's claim: one compare-and-set, its outcome every waiter's", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv, _, l, _ := setup(t)
			ws := []waiter{startWait(t, l, c), startWait(t, l, c), startWait(t, l, c)}
			synctest.Wait()
			_, _, before := kv.counts()
			time.Sleep(lease + pollEvery(lease))
			synctest.Wait()
			for _, w := range ws {
				if o := w.got(t); codeOf(o.res) != bus.CodeUnknownOutcome || o.claim != nil {
					t.Fatalf("a waiter: %+v", o)
				}
			}
			if _, _, after := kv.counts(); after-before != 1 {
				t.Fatalf("%d compare-and-sets to take the claim over, want 1", after-before)
			}
			if le := kv.entry(t); le.State != stateDone || le.Router != "b" {
				t.Fatalf("the entry after the takeover: %+v", le)
			}
		})
	})

	t.Run("a re-run: one waiter runs the call, the others get its record", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv, _, l, _ := setup(t)
			retry := c
			retry.Retry = true
			ws := []waiter{startWait(t, l, retry), startWait(t, l, retry), startWait(t, l, retry)}
			synctest.Wait()
			_, _, before := kv.counts()
			time.Sleep(lease + pollEvery(lease))
			synctest.Wait()
			var runner *Entry
			var rest []waiter
			for _, w := range ws {
				select {
				case o := <-w.out:
					if o.claim == nil || runner != nil {
						t.Fatalf("a waiter returned %+v", o)
					}
					runner = o.claim
				default:
					rest = append(rest, w)
				}
			}
			if runner == nil {
				t.Fatal("no waiter took the claim over to run the call")
			}
			if _, _, after := kv.counts(); after-before != 1 {
				t.Fatalf("%d compare-and-sets to take the claim over, want 1", after-before)
			}
			rerun := bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("rerun")}
			l.Record(t.Context(), "k", *runner, rerun)
			synctest.Wait()
			for _, w := range rest {
				if o := w.got(t); textOf(o.res.Output) != "rerun" || o.claim != nil {
					t.Fatalf("a waiter after the re-run: %+v", o)
				}
			}
			if err := l.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if opened, stopped, _ := kv.counts(); opened != stopped {
				t.Fatalf("watches opened %d, stopped %d", opened, stopped)
			}
		})
	})

	t.Run("a re-run whose waiters all left: its claim is abandoned", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv, _, l, _ := setup(t)
			retry := c
			retry.Retry = true
			a, b := startWait(t, l, retry), startWait(t, l, retry)
			synctest.Wait()
			var left []waited
			kv.mu.Lock()
			kv.beforeUpdate = func() { // the takeover's compare-and-set: both leave first
				a.cancel()
				b.cancel()
				left = append(left, <-a.out, <-b.out)
			}
			kv.mu.Unlock()
			time.Sleep(lease + pollEvery(lease))
			synctest.Wait()
			if len(left) != 2 {
				t.Fatal("no takeover")
			}
			for _, o := range left {
				if codeOf(o.res) != bus.CodeInterrupted || o.claim != nil {
					t.Fatalf("a waiter that left: %+v", o)
				}
			}
			if err := l.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if le := kv.entry(t); le.State != stateAbandoned || le.Router != "b" {
				t.Fatalf("the claim nobody took: %+v", le)
			}
			if n := len(l.held.all()); n != 0 {
				t.Fatalf("%d claims still held", n)
			}
		})
	})
}

// Waiters joining and leaving at once, some while the watch they joined is
// being stopped, others after the result: each gets an outcome, every
// watch opened is stopped, and no wait is left listed.
func TestSharedWaitChurn(t *testing.T) {
	kv := &fakeKV{}
	owner := New(kv, Config{Router: "a", Lease: time.Hour})
	l := New(kv, Config{Router: "b", Lease: time.Hour})
	_, claim := owner.claim(t.Context(), "k", time.Hour, time.Time{}, digests{})
	c := Call{Key: "k", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Hour}
	const n = 200
	outs := make(chan waited, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithCancel(t.Context())
			if i%2 == 0 {
				cancel() // leaves at once: the watch it joined may be stopping
			}
			defer cancel()
			r, cl := l.wait(ctx, c)
			outs <- waited{r, cl}
		}()
		if i == n/2 {
			owner.Record(t.Context(), "k", claim, bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")})
		}
	}
	for range n {
		o := <-outs
		if o.claim != nil || codeOf(o.res) != bus.CodeInterrupted && textOf(o.res.Output) != "done" {
			t.Fatalf("a waiter: %+v", o)
		}
	}
	if err := l.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	opened, stopped, _ := kv.counts()
	l.waits.mu.Lock()
	left := len(l.waits.m)
	l.waits.mu.Unlock()
	if opened != stopped || left != 0 {
		t.Fatalf("watches opened %d, stopped %d; %d waits listed", opened, stopped, left)
	}
	t.Logf("%d waiters, %d watches", n, opened)
}

// The Await calls of one key on one router share one watch, as the waits
// of duplicates do: each keeps its own context; the result reaches every
// waiter left, each counted as a hit; the last waiter leaving stops the
// watch, and a later Await opens another. On the fake clock.
func TestSharedAwait(t *testing.T) {
	done := bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")}
	type awaited struct {
		res bus.Result
		ok  bool
	}
	start := func(t *testing.T, l *Ledger) (context.CancelFunc, chan awaited) {
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan awaited, 1)
		go func() {
			r, _, ok := l.Await(ctx, "k")
			out <- awaited{r, ok}
		}()
		return cancel, out
	}
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeKV{}
		owner := New(kv, Config{Router: "a"})
		var hits atomic.Int32
		l := New(kv, Config{Router: "b", Hits: func() { hits.Add(1) }})
		_, claim := owner.claim(t.Context(), "k", time.Hour, time.Time{}, digests{})
		var cancels []context.CancelFunc
		var outs []chan awaited
		for range 5 {
			cancel, out := start(t, l)
			cancels, outs = append(cancels, cancel), append(outs, out)
		}
		synctest.Wait()
		if opened, _, _ := kv.counts(); opened != 1 {
			t.Fatalf("5 awaiters opened %d watches, want 1", opened)
		}
		cancels[0]()
		synctest.Wait()
		if o := <-outs[0]; o.ok {
			t.Fatalf("the awaiter that left: %+v", o)
		}
		if _, stopped, _ := kv.counts(); stopped != 0 {
			t.Fatal("an awaiter's leaving stopped the others' watch")
		}
		owner.Record(t.Context(), "k", claim, done)
		synctest.Wait()
		for _, out := range outs[1:] {
			if o := <-out; !o.ok || textOf(o.res.Output) != "done" {
				t.Fatalf("an awaiter after the record: %+v", o)
			}
		}
		if n := hits.Load(); n != 4 {
			t.Fatalf("%d hits, want one per awaiter answered (4)", n)
		}
		// A later Await opens a watch of its own (the entry is delivered
		// at once); one whose waiters all leave stops it.
		if r, _, ok := l.Await(t.Context(), "k"); !ok || textOf(r.Output) != "done" {
			t.Fatalf("a later Await: %+v %v", r, ok)
		}
		if err := l.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if opened, stopped, _ := kv.counts(); opened != 2 || stopped != 2 {
			t.Fatalf("watches opened %d, stopped %d; want 2 and 2", opened, stopped)
		}
		for _, c := range cancels {
			c()
		}
	})
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeKV{}
		owner := New(kv, Config{Router: "a"})
		l := New(kv, Config{Router: "b"})
		owner.claim(t.Context(), "k", time.Hour, time.Time{}, digests{})
		c1, o1 := start(t, l)
		c2, o2 := start(t, l)
		synctest.Wait()
		c1()
		c2()
		synctest.Wait()
		if a, b := <-o1, <-o2; a.ok || b.ok {
			t.Fatalf("awaiters that left: %+v %+v", a, b)
		}
		if err := l.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if opened, stopped, _ := kv.counts(); opened != 1 || stopped != 1 {
			t.Fatalf("after the last awaiter left: watches opened %d, stopped %d; want 1 and 1", opened, stopped)
		}
	})
}
