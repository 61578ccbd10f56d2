package ledger

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// A re-send's router held past the lease (starved, GC, SIGSTOP) while the
// first run's router renews every heartbeat: it reads the entry, is held
// for two leases, then judges what it read stale (its Touched and its own
// clock since it last saw a change are both past the lease) and reads the
// renewals its watch missed meanwhile, each as stale. Every takeover it
// tries is a compare-and-set on the revision it read, which the renewals
// have moved on: it fails, and the re-read shows a live lease. So the
// call, idempotent with attempts left (a takeover would run it again),
// runs once, and the re-send gets the first run's result.
func TestHeldWaiterRunsNothing(t *testing.T) {
	const hb = 5 * time.Second
	const lease = 3 * hb
	for _, hold := range []time.Duration{lease + time.Second, 2 * lease, 10 * lease} {
		t.Run(hold.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				kv := &fakeKV{}
				owner := New(kv, Config{Router: "a", Lease: lease})
				waiter := New(kv, Config{Router: "b", Lease: lease})
				var runs atomic.Int32
				runs.Add(1) // the first run, which has the claim
				_, claim := owner.claim(t.Context(), "k", time.Hour, time.Time{}, digests{})
				ctx, stop := context.WithCancel(t.Context())
				go func() { // the live router: renews every heartbeat, then records
					tick := time.NewTicker(hb)
					defer tick.Stop()
					for range int(hold/hb) + 20 {
						_ = owner.Renew(ctx, <-tick.C)
					}
					owner.Record(t.Context(), "k", claim, bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("first")})
					stop()
				}()
				w := startWait(t, waiter, Call{Key: "k", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Hour, Retry: true})
				time.Sleep(2 * hb)
				// The hold: the waiter's watch reads nothing (its puts wait
				// in the socket), and its next read is held after it read.
				kv.mu.Lock()
				kv.muted = true
				kv.afterGet = func() { time.Sleep(hold); kv.flush() }
				kv.mu.Unlock()
				<-ctx.Done()
				synctest.Wait()
				o := w.got(t)
				if o.claim != nil {
					runs.Add(1)
				}
				if runs.Load() != 1 || textOf(o.res.Output) != "first" {
					t.Fatalf("the call ran %d times; the re-send got %+v", runs.Load(), o.res)
				}
				if le := kv.entry(t); le.Router != "a" || !le.recorded() {
					t.Fatalf("the entry is %+v", le)
				}
				kv.mu.Lock()
				defer kv.mu.Unlock()
				if kv.afterGet != nil || kv.conflicts == 0 {
					t.Fatalf("no hold, or no takeover tried after it (%d refused): the test tested nothing", kv.conflicts)
				}
				t.Logf("held %v: %d takeovers tried, each refused", hold, kv.conflicts)
			})
		})
	}
}

// The first run's router held past the lease (it renews nothing
// meanwhile): a re-send takes its claim over, as it would a dead
// router's. A write call is not run again: the re-send records
// unknown_outcome, and the held router's own record, when it resumes,
// gives way to it, so the call ran once and has one answer. An idempotent
// call with attempts left is run again by the re-send (docs/protocol.md
// 3.1, 5.6: it may run twice, as a retry after a timeout would).
func TestHeldOwnerRunsOnce(t *testing.T) {
	const hb = 5 * time.Second
	const lease = 3 * hb
	for _, retry := range []bool{false, true} {
		t.Run(map[bool]string{false: "write", true: "idempotent"}[retry], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				kv := &fakeKV{}
				owner := New(kv, Config{Router: "a", Lease: lease})
				waiter := New(kv, Config{Router: "b", Lease: lease})
				c := Call{Key: "k", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Hour, Retry: retry}
				var runs atomic.Int32
				ran := func(text string) bus.Result {
					runs.Add(1)
					return bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text(text)}
				}
				firstRun := make(chan bus.Result)
				go func() { // the held router: its run returns two leases later, nothing renewed
					firstRun <- owner.Claimed(t.Context(), c, func(claim Entry) bus.Result {
						time.Sleep(2 * lease)
						res, _ := owner.Record(t.Context(), "k", claim, ran("first"))
						return res
					})
				}()
				synctest.Wait()
				resent := waiter.Claimed(t.Context(), c, func(claim Entry) bus.Result {
					res, _ := waiter.Record(t.Context(), "k", claim, ran("again"))
					return res
				})
				first := <-firstRun
				want, wantRuns := bus.CodeUnknownOutcome, int32(1)
				if retry {
					want, wantRuns = "", 2
				}
				if runs.Load() != wantRuns || codeOf(resent) != want || codeOf(first) != codeOf(resent) {
					t.Fatalf("%d runs; the re-send got %+v, the held router %+v", runs.Load(), resent, first)
				}
			})
		})
	}
}
