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
)

// MaxIdle is how many goroutines of one pool may wait for work at once; one
// that finishes a task when MaxIdle already wait exits.
const MaxIdle = 256

// Pool is a set of reusable goroutines; the zero value is not usable.
type Pool struct {
	tasks  chan Task // a nil Task: the goroutine that takes it exits
	idle   time.Duration
	reap   atomic.Pointer[time.Timer] // reapIdle's next round
	wg     sync.WaitGroup
	once   sync.Once
	closed atomic.Bool
	idleN  atomic.Int64 // goroutines waiting for work
	low    atomic.Int64 // the fewest waiting since the last reap
}

// New returns a Pool whose goroutines exit after idle (to twice idle)
// without work.
func New(idle time.Duration) *Pool {
	p := &Pool{tasks: make(chan Task), idle: idle}
	p.reap.Store(time.AfterFunc(idle, p.reapIdle))
	return p
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

// work runs t and the tasks handed to it. Waiting, it receives from one
// channel, with no timer of its own: a select over a timer's channel put
// the timer into the P's heap and took it out again on every wait
// (docs/performance.md, session 32); reapIdle ends the idle ones.
func (p *Pool) work(t Task) {
	defer p.wg.Done()
	for t != nil {
		t.Run()
		if p.closed.Load() {
			return
		}
		if p.idleN.Add(1) > MaxIdle {
			p.idleN.Add(-1)
			return
		}
		t = <-p.tasks
		if n := p.idleN.Add(-1); n < p.low.Load() {
			p.low.Store(n) // a race may lose one: a goroutine more stays a round
		}
	}
}

// reapIdle ends as many waiting goroutines as waited the whole round since
// the last one (the fewest waiting meanwhile): one idle for a round exits
// within two.
func (p *Pool) reapIdle() {
	n := p.low.Swap(p.idleN.Load())
	for ; n > 0 && !p.closed.Load(); n-- {
		select {
		case p.tasks <- nil:
		default:
			n = 0
		}
	}
	if !p.closed.Load() {
		p.reap.Store(time.AfterFunc(p.idle, p.reapIdle))
	}
}

// Idle returns how many goroutines wait for work now.
func (p *Pool) Idle() int { return int(p.idleN.Load()) }

// Close makes idle goroutines exit and waits for running tasks to end,
// until ctx ends (then it returns ctx's error; the tasks still end on their
// own). Go must not be called after Close. It is safe to call twice.
func (p *Pool) Close(ctx context.Context) error {
	p.once.Do(func() { p.closed.Store(true); p.reap.Load().Stop() })
	ended := make(chan struct{})
	go func() { p.wg.Wait(); close(ended) }()
	for {
		select {
		case p.tasks <- nil: // an idle goroutine exits
		case <-ended:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("pool: close: %w", ctx.Err())
		}
	}
}
