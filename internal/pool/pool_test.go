package pool_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/pool"
)

func TestPoolRunsEveryTaskAndCloses(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := pool.New(time.Minute)
	var n atomic.Int32
	done := make(chan struct{}, 100)
	for range 100 {
		p.Go(func() { n.Add(1); done <- struct{}{} })
	}
	for range 100 {
		<-done
	}
	p.Close(t.Context())
	p.Close(t.Context())
	if n.Load() != 100 {
		t.Fatalf("ran %d tasks", n.Load())
	}
}

func TestIdleGoroutinesExit(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := pool.New(time.Millisecond)
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	p.Close(t.Context()) // returns once the idle goroutine is gone
}

// TestPoolKeepsAtMostMaxIdle: after a burst of tasks running at once, at
// most MaxIdle goroutines stay waiting for work; the others exit.
func TestPoolKeepsAtMostMaxIdle(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := pool.New(time.Minute)
	defer p.Close(t.Context())
	const n = 4 * pool.MaxIdle
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	for range n {
		p.Go(func() { started.Done(); <-release; done.Done() })
	}
	started.Wait() // n goroutines at once
	close(release)
	done.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for p.Idle() != pool.MaxIdle && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if p.Idle() != pool.MaxIdle {
		t.Fatalf("%d idle goroutines after a burst of %d, want %d", p.Idle(), n, pool.MaxIdle)
	}
}

// signal is a task that says it ran.
type signal chan struct{}

func (s signal) Run() { s <- struct{}{} }

// BenchmarkRun is one task handed to an idle goroutine of the pool and
// run, from one caller: the hand-off and the idle goroutine's loop.
func BenchmarkRun(b *testing.B) {
	p := pool.New(time.Minute)
	defer p.Close(b.Context())
	s := make(signal)
	b.ReportAllocs()
	for b.Loop() {
		p.Run(s)
		<-s
	}
}

// TestIdleGoroutineExitsAfterReuse: a goroutine that ran tasks since its
// idle timer was set still exits once it has been idle that long, without
// Close.
func TestIdleGoroutineExitsAfterReuse(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := pool.New(5 * time.Millisecond)
	defer p.Close(t.Context())
	s := make(signal)
	for range 100 {
		p.Run(s)
		<-s
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Idle() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still idle", p.Idle())
		}
		runtime.Gosched()
	}
}

// TestIdleGoroutinesReaped: goroutines a burst left waiting, which the
// load after it does not need, exit within two rounds of the idle time,
// and the one the load keeps busy stays (synctest's clock).
func TestIdleGoroutinesReaped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pool.New(time.Second)
		defer func() {
			if err := p.Close(t.Context()); err != nil {
				t.Error(err)
			}
		}()
		release := make(chan struct{})
		var burst sync.WaitGroup
		for range 8 {
			burst.Add(1)
			p.Go(func() { <-release; burst.Done() })
		}
		close(release)
		burst.Wait()
		synctest.Wait()
		if n := p.Idle(); n != 8 {
			t.Fatalf("%d goroutines waiting after a burst of 8", n)
		}
		s := make(signal)
		for range 25 { // one task at a time for 2.5 s: one goroutine does
			p.Run(s)
			<-s
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		if n := p.Idle(); n != 1 {
			t.Fatalf("%d goroutines waiting under a load of one task at a time, want 1", n)
		}
	})
}
