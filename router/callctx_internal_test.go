package router

import (
	"context"
	"errors"
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
	list := newCallContexts(base)

	var expired callCtx
	expired.start(list, base, time.Now().Add(time.Millisecond))
	waitDone(t, &expired)
	if !errors.Is(expired.Err(), context.DeadlineExceeded) || context.Cause(&expired) != context.DeadlineExceeded {
		t.Fatalf("expired: err %v, cause %v", expired.Err(), context.Cause(&expired))
	}
	if d, ok := expired.Deadline(); !ok || d.IsZero() {
		t.Fatal("no deadline")
	}

	var cancelled callCtx
	cancelled.start(list, base, time.Now().Add(time.Hour))
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
	live.start(list, base, time.Now().Add(time.Hour))
	drain := errors.New("drain deadline")
	cancelBase(drain)
	waitDone(t, &live)
	if live.Err() != context.Canceled || context.Cause(&live) != drain {
		t.Fatalf("base ended: err %v, cause %v", live.Err(), context.Cause(&live))
	}
	late.start(list, base, time.Now().Add(time.Hour))
	if late.Err() != context.Canceled || context.Cause(&late) != drain {
		t.Fatalf("started after the base ended: err %v, cause %v", late.Err(), context.Cause(&late))
	}
	if list.head != nil {
		t.Fatal("ended contexts still listed")
	}
}

// TestCallCtxTimerReused: a call context ended before its deadline gives
// its timer back stopped, and the next call's deadline still fires.
func TestCallCtxTimerReused(t *testing.T) {
	list := newCallContexts(context.Background())
	for range 3 {
		var c callCtx
		c.start(list, context.Background(), time.Now().Add(time.Hour))
		c.stop()
	}
	var c callCtx
	c.start(list, context.Background(), time.Now().Add(time.Millisecond))
	waitDone(t, &c)
	if c.Err() != context.DeadlineExceeded {
		t.Fatalf("err %v", c.Err())
	}
}
