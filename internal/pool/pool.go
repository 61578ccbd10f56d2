// Package pool runs short tasks on reused goroutines. A NATS handler that
// starts a fresh goroutine per message pays for growing its stack again on
// every message (JSON and schema validation need a few KiB); a goroutine
// that stays alive keeps its grown stack. Idle goroutines exit after a while,
// and Close ends them all.
package pool

import (
	"sync"
	"time"
)

// Pool is a set of reusable goroutines; the zero value is not usable.
type Pool struct {
	tasks chan func()
	quit  chan struct{}
	idle  time.Duration
	wg    sync.WaitGroup
	once  sync.Once
}

// New returns a Pool whose goroutines exit after idle without work.
func New(idle time.Duration) *Pool {
	return &Pool{tasks: make(chan func()), quit: make(chan struct{}), idle: idle}
}

// Go runs f on an idle goroutine of the pool, or on a new one. Callers bound
// the number of tasks in flight themselves.
func (p *Pool) Go(f func()) {
	select {
	case p.tasks <- f:
	default:
		p.wg.Add(1)
		go p.work(f)
	}
}

func (p *Pool) work(f func()) {
	defer p.wg.Done()
	f()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		select {
		case f := <-p.tasks:
			f()
			t.Reset(p.idle)
		case <-t.C:
			return
		case <-p.quit:
			return
		}
	}
}

// Close makes idle goroutines exit and waits for running tasks to end. Go
// must not be called after Close. It is safe to call twice.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}
