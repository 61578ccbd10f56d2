package life_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolbus/toolbus/internal/life"
)

func TestDrain(t *testing.T) {
	const deadline, cleanup = 5 * time.Second, 2 * time.Second
	for _, tc := range []struct {
		name string
		// start starts the work of the case on l.
		start   func(l *life.Life)
		cut     bool          // Drain returns an error
		returns time.Duration // Drain returns this long after it began
	}{
		{name: "idle", start: func(*life.Life) {}, returns: 0},
		{name: "work that ends in time", start: func(l *life.Life) {
			l.Go(func(context.Context) { time.Sleep(time.Second) })
		}, returns: time.Second},
		{name: "work that ends when cut", start: func(l *life.Life) {
			l.Go(func(ctx context.Context) { <-ctx.Done() })
		}, cut: true, returns: deadline},
		{name: "work that ignores the cut", start: func(l *life.Life) {
			l.Go(func(context.Context) { time.Sleep(time.Hour) })
		}, cut: true, returns: deadline + cleanup},
		{name: "a landing write in time", start: func(l *life.Life) {
			ctx, cancel := l.Landing()
			go func() { defer cancel(); sleepCtx(ctx, 3*time.Second) }()
		}, returns: 3 * time.Second},
		{name: "a landing write gets the cleanup window", start: func(l *life.Life) {
			ctx, cancel := l.Landing()
			go func() { defer cancel(); sleepCtx(ctx, deadline+time.Second) }()
		}, returns: deadline + time.Second},
		{name: "a landing write is cut at the window's end", start: func(l *life.Life) {
			ctx, cancel := l.Landing()
			go func() { defer cancel(); sleepCtx(ctx, time.Hour) }()
		}, returns: deadline + cleanup},
		{name: "work waiting on a landing write ends at the window's end", start: func(l *life.Life) {
			// A batch whose events cannot be stored (its connection
			// closed) waits in a landing write: the window that the
			// work's wait used up bounds the landing's too.
			landing := make(chan struct{})
			l.Go(func(context.Context) {
				ctx, cancel := l.Landing()
				defer cancel()
				close(landing)
				sleepCtx(ctx, time.Hour)
			})
			<-landing // the landing write begins before the drain
		}, cut: true, returns: deadline + cleanup},
		{name: "a loop stops once the work is done", start: func(l *life.Life) {
			l.Loop(func(ctx context.Context) { <-ctx.Done() })
			l.Go(func(context.Context) { time.Sleep(time.Second) })
		}, returns: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := life.New(life.Config{Cleanup: cleanup})
				tc.start(l)
				ctx, cancel := context.WithTimeout(t.Context(), deadline)
				defer cancel()
				start := time.Now()
				err := l.Drain(ctx)
				if got := time.Since(start); got != tc.returns {
					t.Errorf("Drain returned after %v, want %v", got, tc.returns)
				}
				if (err != nil) != tc.cut {
					t.Errorf("Drain = %v, want cut %v", err, tc.cut)
				}
				if tc.cut && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Drain = %v, want it to wrap the deadline", err)
				}
				select {
				case <-l.Closed():
				default:
					t.Error("Closed not closed after Drain")
				}
				if !errors.Is(context.Cause(l.Context()), life.ErrStopped) && !errors.Is(context.Cause(l.Context()), life.ErrDeadline) {
					t.Errorf("Context's cause = %v", context.Cause(l.Context()))
				}
				synctest.Wait()
				time.Sleep(time.Hour) // let goroutines that ignored the cut end inside the bubble
			})
		})
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func TestDrainCutsWithCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cause, landCause error
		counted := false
		var l *life.Life
		l = life.New(life.Config{OnDeadline: func() {
			counted = true
			if l.Context().Err() != nil {
				t.Error("OnDeadline called after the cut")
			}
		}})
		l.Go(func(ctx context.Context) { <-ctx.Done(); cause = context.Cause(ctx) })
		lctx, done := l.Landing()
		landed := make(chan struct{})
		go func() { defer done(); <-lctx.Done(); landCause = context.Cause(lctx); close(landed) }()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_ = l.Drain(ctx)
		<-landed
		if !counted || !errors.Is(cause, life.ErrDeadline) || !errors.Is(landCause, life.ErrDeadline) {
			t.Errorf("counted %v, work's cause %v, landing's cause %v; want true and ErrDeadline twice", counted, cause, landCause)
		}
	})
}

func TestRefusedOnceDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := life.New(life.Config{})
		_ = l.Drain(t.Context())
		if l.Enter() || l.Go(func(context.Context) { t.Error("ran after the drain") }) {
			t.Error("work taken after the drain")
		}
		if !l.Draining() {
			t.Error("Draining false after the drain")
		}
		ctx, cancel := l.Landing()
		defer cancel()
		if !errors.Is(context.Cause(ctx), life.ErrStopped) {
			t.Errorf("a landing after the drain has cause %v, want ErrStopped", context.Cause(ctx))
		}
		l.Loop(func(context.Context) { t.Error("loop ran after the drain") })
		synctest.Wait()
	})
}

func TestUnwindOnceInReverse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := life.New(life.Config{})
		var order []int
		for i := range 3 {
			l.Defer(func(context.Context) error { order = append(order, i); return nil })
		}
		done := make(chan error)
		for range 2 {
			go func() { done <- l.Drain(t.Context()) }()
		}
		<-done
		<-done
		_ = l.Drain(t.Context())
		if !slices.Equal(order, []int{2, 1, 0}) {
			t.Errorf("unwind ran %v, want [2 1 0] once", order)
		}
	})
}

func TestEveryTicksUntilItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var ticks []time.Time
		done := make(chan struct{})
		start := time.Now()
		go func() {
			defer close(done)
			life.Every(ctx, time.Second, func(now time.Time) {
				ticks = append(ticks, now)
				if len(ticks) == 3 {
					cancel()
				}
			})
		}()
		<-done
		if len(ticks) != 3 || !ticks[2].Equal(start.Add(3*time.Second)) {
			t.Fatalf("ticks %v, want three, a second apart from %v", ticks, start)
		}
	})
}

// TestLandingWhileDrainWaits: a landing write may begin while the drain
// waits for the landing writes, even just as the last one ended (a
// continuation's sweep records an answer during a drain). The drain sees
// the moment none was in flight and goes on; the late write is cut with the
// rest at the end of the window (or refused, when the drain got there first). Before, the writes were counted by a
// WaitGroup, whose Add from zero during its Wait the race detector reported.
func TestLandingWhileDrainWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := life.New(life.Config{})
		_, first := l.Landing()
		drained := make(chan error, 1)
		go func() { drained <- l.Drain(t.Context()) }()
		synctest.Wait() // the drain waits for the first write
		first()
		late, lateDone := l.Landing() // begins before the drain's wait returns
		defer lateDone()
		if err := <-drained; err != nil {
			t.Fatalf("Drain: %v", err)
		}
		// Cut by the drain (ErrDeadline), or refused (ErrStopped) when the
		// drain's goroutine closed the landings first.
		if c := context.Cause(late); !errors.Is(c, life.ErrDeadline) && !errors.Is(c, life.ErrStopped) {
			t.Fatalf("the late write's context: %v, want it cut", c)
		}
		if ctx, _ := l.Landing(); ctx.Err() == nil {
			t.Fatal("a landing write after the drain got a live context")
		}
	})
}
