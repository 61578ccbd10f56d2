package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// gatedProbe is a probe that runs only when released, and counts its runs:
// the error of run n says "run n".
type gatedProbe struct {
	runs    atomic.Int32
	release chan struct{}
	sawCtx  chan context.Context
}

func newGatedProbe() *gatedProbe {
	return &gatedProbe{release: make(chan struct{}), sawCtx: make(chan context.Context, 16)}
}

func (g *gatedProbe) fn(ctx context.Context) error {
	n := g.runs.Add(1)
	g.sawCtx <- ctx
	<-g.release
	return fmt.Errorf("run %d", n)
}

// TestProbesCoalesce: a burst of calls for one tool while a probe of it
// runs costs one more probe, not one each, and every caller gets a probe
// that began after it came (a registration acknowledged before a call
// must count for it).
func TestProbesCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p probes
		g := newGatedProbe()
		first := make(chan error, 1)
		go func() { first <- p.do(t.Context(), "t", g.fn) }()
		synctest.Wait() // run 1 is under way
		const burst = 50
		errs := make(chan error, burst)
		var wg sync.WaitGroup
		for range burst {
			wg.Go(func() { errs <- p.do(t.Context(), "t", g.fn) })
		}
		other := make(chan error, 1)
		go func() { other <- p.do(t.Context(), "u", g.fn) }() // another tool does not wait
		synctest.Wait()
		if got := g.runs.Load(); got != 2 {
			t.Fatalf("%d probes under way, want 2 (one per tool)", got)
		}
		close(g.release)
		wg.Wait()
		close(errs)
		if err := <-first; err == nil || err.Error() != "run 1" {
			t.Fatalf("the first caller got %v", err)
		}
		<-other
		if got := g.runs.Load(); got != 3 {
			t.Fatalf("%d probes in all, want 3: one per tool, one shared by the burst", got)
		}
		for err := range errs {
			if err == nil || err.Error() != "run 3" {
				t.Fatalf("a caller that came while run 1 went on got %v, want the probe after it", err)
			}
		}
		if len(p.runs) != 0 {
			t.Fatalf("%d probes left behind", len(p.runs))
		}
	})
}

// TestProbesCallerGivesUp: a caller whose context ends returns at once;
// the probe it started runs on, bounded, for those who share it, and its
// context is not the caller's.
func TestProbesCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p probes
		g := newGatedProbe()
		ctx, cancel := context.WithCancel(t.Context())
		gaveUp := make(chan error, 1)
		go func() { gaveUp <- p.do(ctx, "t", g.fn) }()
		synctest.Wait()
		pctx := <-g.sawCtx
		if dl, ok := pctx.Deadline(); !ok || time.Until(dl) > probeBound {
			t.Fatalf("the probe's deadline %v (set %v), want at most %v away", dl, ok, probeBound)
		}
		waiter := make(chan error, 1)
		go func() { waiter <- p.do(t.Context(), "t", g.fn) }()
		synctest.Wait()
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller who gave up got %v", err)
		}
		if pctx.Err() != nil {
			t.Fatal("the probe's context ended with its caller's")
		}
		close(g.release)
		if err := <-waiter; err == nil || err.Error() != "run 2" {
			t.Fatalf("the waiter got %v, want run 2", err)
		}
	})
}

// TestStopEndsProbes (session 40): Stop did not wait for the probes
// Refresh started, which ran on (up to probeBound) after it returned. Now
// Stop waits for them until its ctx ends, then cancels them and waits for
// them to end; a probe queued behind one ends too, and none starts after.
func TestStopEndsProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Registry{}
		var running, calls atomic.Int32
		probe := func(ctx context.Context) error { // a read that waits for its context
			calls.Add(1)
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			return ctx.Err()
		}
		for _, tool := range []string{"t", "t", "u"} { // the second "t" waits for the first
			go func() { _ = r.probes.do(t.Context(), tool, probe) }()
			synctest.Wait()
		}
		if n := running.Load(); n != 2 {
			t.Fatalf("%d probes running, want 2", n)
		}
		const bound = time.Second
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		start := time.Now()
		if err := r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop with probes cut off returned %v", err)
		}
		if n := running.Load(); n != 0 {
			t.Fatalf("%d probes still running after Stop", n)
		}
		if took := time.Since(start); took != bound {
			t.Fatalf("Stop took %v, want its ctx's %v (the probes end once cancelled)", took, bound)
		}
		if n := calls.Load(); n != 3 {
			t.Fatalf("%d probes ran, want 3 (the queued one cancelled at once)", n)
		}
		if err := r.probes.do(t.Context(), "v", probe); !errors.Is(err, errStopped) || calls.Load() != 3 {
			t.Fatalf("a probe after Stop: %v, %d ran", err, calls.Load())
		}
		if err := r.Stop(t.Context()); err == nil {
			t.Fatal("a second Stop forgot the first's result")
		}
	})
}
