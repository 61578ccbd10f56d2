package worker

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

// TestCallCtxIsWithDeadline: whatever happens before the context is made
// (a stop, the parent's end with a cause, the deadline passing), the
// call's context then says what context.WithDeadline's made at the start
// says; and made first, it follows what happens after.
func TestCallCtxIsWithDeadline(t *testing.T) {
	cause := errors.New("drained")
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name     string
		deadline time.Time
		stop     bool // stop the call
		parent   bool // end the parent, with cause
		early    bool // make the context before the events
	}{
		{"nothing happened", future, false, false, false},
		{"no deadline", time.Time{}, false, false, false},
		{"stopped", future, true, false, false},
		{"parent ended", future, false, true, false},
		{"deadline passed", past, false, false, false},
		{"stopped, made first", future, true, false, true},
		{"parent ended, made first", future, false, true, true},
		{"deadline passed, made first", past, false, false, true},
		{"stopped and parent ended, no deadline", time.Time{}, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, end := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
			defer end(nil)
			var c callCtx
			c.init(base, tc.deadline)
			var want context.Context = base
			stopWant := func() {}
			if !tc.deadline.IsZero() {
				var cancel context.CancelFunc
				want, cancel = context.WithDeadline(base, tc.deadline)
				stopWant = cancel
			} else {
				var cancel context.CancelFunc
				want, cancel = context.WithCancel(base)
				stopWant = cancel
			}
			if tc.early {
				_ = c.Done()
			}
			if tc.stop {
				c.stop()
				stopWant()
			}
			if tc.parent {
				end(cause)
			}
			if d, ok := c.Deadline(); !d.Equal(tc.deadline) || ok == tc.deadline.IsZero() {
				t.Errorf("deadline %v %v, want %v", d, ok, tc.deadline)
			}
			if tc.deadline.Before(time.Now()) && !tc.deadline.IsZero() {
				<-want.Done()
			}
			ended := tc.stop || tc.parent || !tc.deadline.IsZero() && tc.deadline.Before(time.Now())
			if ended {
				select {
				case <-c.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("not done")
				}
			} else {
				select {
				case <-c.Done():
					t.Fatal("done")
				default:
				}
			}
			if !errors.Is(c.Err(), want.Err()) || !errors.Is(context.Cause(&c), context.Cause(want)) {
				t.Errorf("err %v cause %v, want %v %v", c.Err(), context.Cause(&c), want.Err(), context.Cause(want))
			}
			if c.Value(ctxKey{}) != "v" {
				t.Error("the parent's value is lost")
			}
			child, cancel := context.WithCancel(&c)
			defer cancel()
			if (child.Err() != nil) != ended {
				t.Errorf("a child context's err %v", child.Err())
			}
			c.stop()
			<-child.Done()
		})
	}
}

// TestCallCtxUnmade: a context nobody asked for is never made, its cause
// is its parent's, or the stop's when that came first; and it takes no
// allocation (it lives in the call's request).
func TestCallCtxUnmade(t *testing.T) {
	base, end := context.WithCancelCause(context.Background())
	var running, stopped callCtx
	running.init(base, time.Now().Add(time.Hour))
	stopped.init(base, time.Now().Add(time.Hour))
	if d, ok := running.Deadline(); !ok || d.IsZero() {
		t.Fatal("no deadline")
	}
	stopped.stop()
	if running.cause() != nil || stopped.cause() != context.Canceled {
		t.Fatalf("causes %v, %v", running.cause(), stopped.cause())
	}
	end(errDrained)
	if running.cause() != errDrained || stopped.cause() != context.Canceled || running.made.Load() || stopped.made.Load() {
		t.Fatalf("causes %v, %v after the parent's end", running.cause(), stopped.cause())
	}
	ctxs := make([]callCtx, 200)
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		c := &ctxs[i]
		i++
		c.init(base, time.Now())
		_, _ = c.Deadline()
		c.stop()
	}); n != 0 {
		t.Errorf("%v allocations for a context never made", n)
	}
}
