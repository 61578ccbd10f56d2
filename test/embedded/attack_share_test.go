package embedded

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackSessionTakesEverySlot (the red team's residual risk, session
// 17): one session sends more batches at once than the router has slots,
// each calling a tool that runs for minutes. Every MaxInflight slot held
// one of them and the queue the rest, so another session's batch was
// answered busy until one ended: its client retried until its own
// deadline. A session's batches hold at most its share of the slots
// (router.DefaultSessionShare: 16 of 32 here); past it they are answered
// busy at once, before they take or wait for a slot, and another
// session's batch runs. Once the long calls end, the refused batches,
// which the client retried, run too: nothing was lost.
func TestAttackSessionTakesEverySlot(t *testing.T) {
	const slots = 32
	share := router.DefaultSessionShare(slots)
	reg := prometheus.NewRegistry()
	e := startEnv(t, 1, false, router.Config{MaxInflight: slots, Metrics: reg})
	g := newGate(t)
	running := hogWorker(t, e, g)
	const hog, other = "share-hog", "share-other"
	refusedKey := `toolbus_router_rejected_total{code="session_share"}`

	// The flood: more batches than the router has slots, each its own
	// turn, retried by the client while they are refused.
	flood := slots + share
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	answers := make(chan string, flood)
	for range flood {
		go func() {
			r, err := e.client.Call(ctx, hog, bus.Batch{Calls: []bus.Call{{ID: "c", Name: "hog_slots"}}})
			switch {
			case err != nil:
				answers <- err.Error()
			case r.Results[0].State != bus.StateSuccess:
				answers <- r.Results[0].State + " " + textOf(r.Results[0])
			default:
				answers <- ""
			}
		}()
	}
	// The share runs at the worker, and the router has refused as many
	// batches as the flood holds past it (the client retries them). A
	// router without shares gets here once the flood holds every slot.
	poll, pcancel := context.WithTimeout(t.Context(), bound)
	defer pcancel()
	for int(running.Load()) < share || (gather(t, reg)[refusedKey] < float64(flood-share) && running.Load() < slots) {
		if bus.Sleep(poll, 20*time.Millisecond) != nil {
			t.Fatalf("after %s, %d of the flood's calls run and %v refusals past the share; want %d and at least %d",
				bound, running.Load(), gather(t, reg)[refusedKey], share, flood-share)
		}
	}
	// Another session's batch runs meanwhile.
	octx, ocancel := context.WithTimeout(t.Context(), bound)
	defer ocancel()
	r, err := e.client.Call(octx, other, bus.Batch{Calls: []bus.Call{{ID: "p", Name: "probe_share"}}})
	if err != nil {
		t.Fatalf("another session's batch while one session floods: %v", err)
	}
	if got := r.Results[0]; got.State != bus.StateSuccess || textOf(got) != "probe" {
		t.Fatalf("another session's batch while one session floods: %s %q", got.State, textOf(got))
	}
	if n := running.Load(); int(n) != share {
		t.Fatalf("%d of one session's batches run at once; its share is %d", n, share)
	}

	// A refusal is busy, saying why.
	ev := newEvent(t, bus.TypeCallBatch, bus.Batch{Calls: []bus.Call{{ID: "c", Name: "hog_slots"}}})
	ev.SessionID = hog
	reply := e.request(t, eventMsg(t, bus.NewSubjects("").Call(hog), ev))
	wantErrorEvent(t, reply, bus.CodeBusy)
	if !strings.Contains(string(reply.Data), fmt.Sprintf("this session holds its share of the router's slots (%d)", share)) {
		t.Fatalf("a batch past the session's share: want busy naming the share, got %s", reply.Data)
	}

	g.open()
	for range flood {
		if a := <-answers; a != "" {
			t.Fatalf("a batch of the flood, once the long calls ended: %s", a)
		}
	}
	if n := running.Load(); int(n) != flood {
		t.Fatalf("%d runs for %d batches", n, flood)
	}
}

// TestSessionShareDropsUnrepliedBatches: batches published without a
// reply subject past their session's share have nobody to be told busy:
// they are dropped and counted, never waited for in the subscription's
// callback (where they would hold every other session's batches behind
// them), and another session's batch runs.
func TestSessionShareDropsUnrepliedBatches(t *testing.T) {
	const slots, extra = 32, 4
	share := router.DefaultSessionShare(slots)
	reg := prometheus.NewRegistry()
	e := startEnv(t, 1, false, router.Config{MaxInflight: slots, Metrics: reg})
	g := newGate(t)
	running := hogWorker(t, e, g)
	const hog = "drop-hog"
	for range share + extra {
		ev := newEvent(t, bus.TypeCallBatch, bus.Batch{Calls: []bus.Call{{ID: "c", Name: "hog_slots"}}})
		ev.SessionID = hog
		if err := e.nc.PublishMsg(eventMsg(t, bus.NewSubjects("").Call(hog), ev)); err != nil {
			t.Fatal(err)
		}
	}
	refusedKey := `toolbus_router_rejected_total{code="session_share"}`
	poll, pcancel := context.WithTimeout(t.Context(), bound)
	defer pcancel()
	for int(running.Load()) < share || gather(t, reg)[refusedKey] < extra {
		if bus.Sleep(poll, 20*time.Millisecond) != nil {
			t.Fatalf("after %s, %d run and %v dropped; want %d and %d", bound, running.Load(), gather(t, reg)[refusedKey], share, extra)
		}
	}
	r := e.call(t, "drop-other", []bus.Call{{ID: "p", Name: "probe_share"}}).Results[0]
	if r.State != bus.StateSuccess {
		t.Fatalf("another session's batch: %s %q", r.State, textOf(r))
	}
	if n, d := running.Load(), gather(t, reg)[refusedKey]; int(n) != share || d != extra {
		t.Fatalf("%d run and %v dropped of %d published; want %d and %d", n, d, share+extra, share, extra)
	}
}

// hogWorker adds a worker of hog_slots, which counts its runs and holds
// each until g opens, and probe_share, which answers at once.
func hogWorker(t *testing.T, e *env, g *gate) *atomic.Int32 {
	t.Helper()
	running := new(atomic.Int32)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "hog_slots", ReadOnly: true, TimeoutMS: 120_000}, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			running.Add(1)
			select {
			case <-g.ch:
				return textResult("hogged"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		handle(t, w, bus.ToolDef{Name: "probe_share", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return textResult("probe"), nil
		})
	})
	e.waitLive("hog_slots", "probe_share")
	return running
}
