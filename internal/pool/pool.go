// Package pool runs short tasks on reused goroutines, which keep their grown
// stacks. Idle ones exit after a while, at most MaxIdle stay, and Close ends
// them all.
package pool

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/life"
)

// MaxIdle is how many goroutines of one pool may wait for work at once; one
// that finishes a task when MaxIdle already wait exits.
const MaxIdle = 256

// Pool is a set of reusable goroutines; the zero value is not usable.
type Pool struct {
	tasks chan Task
	quit  chan struct{}
	idle  time.Duration
	wg    sync.WaitGroup
	once  sync.Once
	idleN atomic.Int64 // goroutines waiting for work
}

// New returns a Pool whose goroutines exit after idle (to twice idle)
// without work.
func New(idle time.Duration) *Pool {
	return &Pool{tasks: make(chan Task), quit: make(chan struct{}), idle: idle}
}

// Task is what a pool runs. A caller that already has a value per task
// (a request) gives it as a Task and spares the closure Go would take.
type Task interface{ Run() }

// funcTask is a func as a Task (no allocation: a func value fits an interface).
type funcTask func()

func (f funcTask) Run() { f() }

// Go runs f on an idle goroutine of the pool, or on a new one. Callers bound
// the number of tasks in flight themselves.
func (p *Pool) Go(f func()) { p.Run(funcTask(f)) }

// Run is Go for a Task.
func (p *Pool) Run(t Task) {
	select {
	case p.tasks <- t:
	default:
		p.wg.Add(1)
		go p.work(t)
	}
}

// work runs f and the tasks handed to it until idle for p.idle to twice
// that; its timer is not reset per task.
func (p *Pool) work(f Task) {
	defer p.wg.Done()
	f.Run()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	worked := false
	for {
		if p.idleN.Add(1) > MaxIdle {
			p.idleN.Add(-1)
			return
		}
		select {
		case f := <-p.tasks:
			p.idleN.Add(-1)
			f.Run()
			worked = true
		case <-t.C:
			p.idleN.Add(-1)
			if !worked {
				return
			}
			worked = false
			t.Reset(p.idle)
		case <-p.quit:
			p.idleN.Add(-1)
			return
		}
	}
}

// Idle returns how many goroutines wait for work now.
func (p *Pool) Idle() int { return int(p.idleN.Load()) }

// Close makes idle goroutines exit and waits for running tasks to end,
// until ctx ends (then it returns ctx's error; the tasks still end on their
// own). Go must not be called after Close. It is safe to call twice.
func (p *Pool) Close(ctx context.Context) error {
	p.once.Do(func() { close(p.quit) })
	if !life.WaitFor(ctx, &p.wg) {
		return fmt.Errorf("pool: close: %w", ctx.Err())
	}
	return nil
}
