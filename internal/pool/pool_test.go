package pool_test

import (
	"sync/atomic"
	"testing"
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
	p.Close()
	p.Close()
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
	p.Close() // returns once the idle goroutine is gone
}
