package router

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// waitDone fails t unless ctx ends within a generous bound (a failure,
// not a synchronisation: the contexts below end by themselves).
func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end")
	}
}

// TestCallCtxAsWithDeadline: a call context ends as one of
// context.WithDeadline under the same base would: by its deadline, by its
// cancel, and by the base with the base's cause; contexts derived from it
// end with it.
func TestCallCtxAsWithDeadline(t *testing.T) {
	base, cancelBase := context.WithCancelCause(context.Background())
	defer cancelBase(nil)
	root := newCallContexts(base)

	var expired callCtx
	expired.start(root, time.Now().Add(time.Millisecond))
	waitDone(t, &expired)
	if !errors.Is(expired.Err(), context.DeadlineExceeded) || context.Cause(&expired) != context.DeadlineExceeded {
		t.Fatalf("expired: err %v, cause %v", expired.Err(), context.Cause(&expired))
	}
	if d, ok := expired.Deadline(); !ok || d.IsZero() {
		t.Fatal("no deadline")
	}

	var cancelled callCtx
	cancelled.start(root, time.Now().Add(time.Hour))
	child, cancelChild := context.WithCancel(&cancelled)
	defer cancelChild()
	after := make(chan struct{})
	context.AfterFunc(&cancelled, func() { close(after) })
	unscheduled := context.AfterFunc(&cancelled, func() { t.Error("an AfterFunc stopped ran") })
	if !unscheduled() {
		t.Fatal("AfterFunc's stop before the end reported false")
	}
	if cancelled.Err() != nil {
		t.Fatal("ended before its cancel")
	}
	cancelled.stop()
	cancelled.stop()
	waitDone(t, child)
	<-after
	if cancelled.Err() != context.Canceled || context.Cause(&cancelled) != context.Canceled {
		t.Fatalf("cancelled: err %v, cause %v", cancelled.Err(), context.Cause(&cancelled))
	}

	var live, late callCtx
	live.start(root, time.Now().Add(time.Hour))
	drain := errors.New("drain deadline")
	cancelBase(drain)
	waitDone(t, &live)
	if live.Err() != context.Canceled || context.Cause(&live) != drain {
		t.Fatalf("base ended: err %v, cause %v", live.Err(), context.Cause(&live))
	}
	late.start(root, time.Now().Add(time.Hour))
	if late.Err() != context.Canceled || context.Cause(&late) != drain {
		t.Fatalf("started after the base ended: err %v, cause %v", late.Err(), context.Cause(&late))
	}
	root.mu.Lock()
	defer root.mu.Unlock()
	if root.kids != nil {
		t.Fatal("ended contexts still listed")
	}
}

// TestCallCtxTimerReused: a call context ended before its deadline gives
// its timer back stopped, and the next call's deadline still fires.
func TestCallCtxTimerReused(t *testing.T) {
	root := newCallContexts(context.Background())
	for range 3 {
		var c callCtx
		c.start(root, time.Now().Add(time.Hour))
		c.stop()
	}
	var c callCtx
	c.start(root, time.Now().Add(time.Millisecond))
	waitDone(t, &c)
	if c.Err() != context.DeadlineExceeded {
		t.Fatalf("err %v", c.Err())
	}
}

type ctxKey string

// TestCallCtxNested: an attempt's callCtx under a call's (or under a
// context over one) ends as context.WithDeadline under the call's context
// would, by its parent, its own deadline, its cancel or the base, with the
// same Err and Cause; its end leaves its parent live; under a context that
// is not over a callCtx it ends through context.AfterFunc.
func TestCallCtxNested(t *testing.T) {
	drain := errors.New("drain deadline")
	const hour = time.Hour
	type setup struct {
		base    context.Context
		end     context.CancelCauseFunc // ends the base
		root    *callCtx                // the calls' root over the base
		call    *callCtx                // the call's context, under the root
		parent  context.Context         // the attempt's parent: call, or a context over it
		attempt *callCtx
	}
	cases := []struct {
		name       string
		callEnds   time.Duration // the call's deadline from its start; zero: none
		over       func(*testing.T, context.Context) context.Context
		attemptAt  time.Duration // the attempt's deadline from its start
		kid        bool          // the attempt is among the call's kids
		act        func(s *setup)
		callErr    error // after act; nil: live
		attemptErr error
		cause      error // of the attempt
	}{
		{name: "call's cancel ends the attempt", kid: true, attemptAt: hour,
			act: func(s *setup) { s.call.stop() }, callErr: context.Canceled, attemptErr: context.Canceled, cause: context.Canceled},
		{name: "attempt's deadline", kid: true, attemptAt: time.Millisecond,
			act: func(s *setup) { waitDone(t, s.attempt) }, attemptErr: context.DeadlineExceeded, cause: context.DeadlineExceeded},
		{name: "attempt's cancel leaves the call live", kid: true, attemptAt: hour,
			act: func(s *setup) { s.attempt.stop() }, attemptErr: context.Canceled, cause: context.Canceled},
		{name: "base's end ends both with its cause", kid: true, attemptAt: hour,
			act: func(s *setup) { s.end(drain); waitDone(t, s.call) }, callErr: context.Canceled, attemptErr: context.Canceled, cause: drain},
		// The root's sweep run by hand past the call's deadline: a real one
		// of a millisecond could fire, under load, before the attempt starts
		// (not a kid then).
		{name: "call's deadline ends the attempt as expired", kid: true, callEnds: hour, attemptAt: 2 * hour,
			act: func(s *setup) { s.root.sw.sweep(s.root, time.Now().Add(hour+time.Second)) }, callErr: context.DeadlineExceeded, attemptErr: context.DeadlineExceeded, cause: context.DeadlineExceeded},
		{name: "over a value context of the call", kid: true, attemptAt: hour,
			over: func(_ *testing.T, ctx context.Context) context.Context {
				return context.WithValue(ctx, ctxKey("k"), "v")
			},
			act: func(s *setup) { s.call.stop() }, callErr: context.Canceled, attemptErr: context.Canceled, cause: context.Canceled},
		{name: "over a cancel context of the call: AfterFunc", attemptAt: hour,
			over: cancelOver,
			act:  func(s *setup) { s.call.stop(); waitDone(t, s.attempt) }, callErr: context.Canceled, attemptErr: context.Canceled, cause: context.Canceled},
		{name: "over a cancel context, the attempt ends alone", attemptAt: hour,
			over: cancelOver,
			act:  func(s *setup) { s.attempt.stop() }, attemptErr: context.Canceled, cause: context.Canceled},
		{name: "under the base's cause, over a cancel context", attemptAt: hour,
			over: cancelOver,
			act:  func(s *setup) { s.end(drain); waitDone(t, s.attempt) }, callErr: context.Canceled, attemptErr: context.Canceled, cause: drain},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base, end := context.WithCancelCause(context.WithValue(context.Background(), ctxKey("base"), "b"))
			defer end(nil)
			s := &setup{base: base, end: end, call: new(callCtx), attempt: new(callCtx)}
			var callEnds time.Time
			if tc.callEnds > 0 {
				callEnds = time.Now().Add(tc.callEnds)
			}
			s.root = newCallContexts(base)
			s.call.start(s.root, callEnds)
			s.parent = s.call
			if tc.over != nil {
				s.parent = tc.over(t, s.call)
			}
			s.attempt.start(s.parent, time.Now().Add(tc.attemptAt))
			if got := s.attempt.up == s.call; got != tc.kid {
				t.Fatalf("among the call's kids: %v, want %v", got, tc.kid)
			}
			if s.attempt.Value(ctxKey("base")) != "b" || s.attempt.Value(&callCtxKey) != s.attempt {
				t.Fatal("values not the parent's")
			}
			if tc.over != nil && tc.kid && s.attempt.Value(ctxKey("k")) != "v" {
				t.Fatal("the value context's value is lost")
			}
			ran := make(chan struct{})
			context.AfterFunc(s.attempt, func() { close(ran) })
			derived, cancel := context.WithCancel(s.attempt)
			defer cancel()

			tc.act(s)

			// A cancel ends the attempt before it returns, as the
			// context package's does its children.
			if err := s.call.Err(); err != tc.callErr {
				t.Fatalf("call: err %v, want %v", err, tc.callErr)
			}
			if err := s.attempt.Err(); err != tc.attemptErr {
				t.Fatalf("attempt: err %v, want %v", err, tc.attemptErr)
			}
			if c := context.Cause(s.attempt); c != tc.cause {
				t.Fatalf("attempt: cause %v, want %v", c, tc.cause)
			}
			<-ran
			waitDone(t, derived)
			if derived.Err() != tc.attemptErr {
				t.Fatalf("derived: err %v, want %v", derived.Err(), tc.attemptErr)
			}
			if tc.callErr == nil {
				s.call.stop()
			}
			s.call.mu.Lock()
			kids := s.call.kids
			s.call.mu.Unlock()
			if kids != nil || s.attempt.linked {
				t.Fatal("an ended attempt is still among the call's kids")
			}
		})
	}
}

// cancelOver is a cancel context over ctx: not a callCtx's, so a callCtx
// under it ends through context.AfterFunc.
func cancelOver(t *testing.T, ctx context.Context) context.Context {
	c, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	return c
}

// TestCallCtxNestedStart: an attempt started under a call that ended is
// ended at once, with the call's state; its deadline is the earlier of its
// own and the call's; a call context has none of its own when it is given
// none.
func TestCallCtxNestedStart(t *testing.T) {
	root := newCallContexts(context.Background())
	var call callCtx
	call.start(root, time.Time{})
	if _, ok := call.Deadline(); ok {
		t.Fatal("a call without a deadline has one")
	}
	soon, later := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	var a, b callCtx
	a.start(&call, soon)
	if d, ok := a.Deadline(); !ok || !d.Equal(soon) {
		t.Fatalf("attempt's deadline %v %v", d, ok)
	}
	var timed callCtx
	timed.start(root, soon)
	b.start(&timed, later)
	if d, ok := b.Deadline(); !ok || !d.Equal(soon) || b.timer != nil {
		t.Fatalf("under an earlier deadline: %v %v, own timer %v", d, ok, b.timer != nil)
	}
	timed.stop()
	a.stop()
	call.stop()
	var late callCtx
	late.start(&call, soon)
	if late.Err() != context.Canceled || late.linked {
		t.Fatalf("started under an ended call: err %v, linked %v", late.Err(), late.linked)
	}
	var expired, under callCtx
	expired.start(root, time.Now().Add(time.Millisecond))
	waitDone(t, &expired)
	under.start(&expired, soon)
	if under.Err() != context.DeadlineExceeded {
		t.Fatalf("under an expired call: err %v", under.Err())
	}
	var none callCtx
	none.start(context.WithoutCancel(&call), time.Time{})
	if none.Err() != nil || none.Done() == nil {
		t.Fatal("under a context that never ends")
	}
	none.stop()
}

// TestCallCtxNestedRace: calls, their attempts, the base and cancels end
// one another concurrently (run under -race): every context ends, once,
// and nothing stays listed.
func TestCallCtxNestedRace(t *testing.T) {
	base, end := context.WithCancelCause(context.Background())
	defer end(nil)
	root := newCallContexts(base)
	const calls = 64
	var wg sync.WaitGroup
	attempts := make(chan *callCtx, calls*3)
	for i := range calls {
		wg.Go(func() {
			call := new(callCtx)
			call.start(root, time.Time{})
			defer call.stop()
			for range 3 {
				a := new(callCtx)
				a.start(context.WithValue(call, ctxKey("k"), i), time.Now().Add(time.Duration(i%3)*time.Millisecond))
				attempts <- a
				if i%2 == 0 {
					a.stop()
				}
			}
		})
		if i == calls/2 {
			end(errors.New("drain"))
		}
	}
	wg.Wait()
	close(attempts)
	for a := range attempts {
		waitDone(t, a)
	}
	root.mu.Lock()
	defer root.mu.Unlock()
	if root.kids != nil {
		t.Fatal("ended contexts still listed")
	}
}
