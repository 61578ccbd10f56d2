package registry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/life"
)

// probeBound bounds one probe of the workers bucket, past its callers.
const probeBound = 5 * time.Second

// errStopped is what a probe asked for once the registry stops.
var errStopped = errors.New("registry: stopped")

// probes coalesces the probes of one tool's workers: one read per burst, yet each
// caller gets a probe begun after it came (singleflight would share an older one).
// The probes are the tracked work of a life: stop waits for them, then cancels
// them, and none starts after it.
type probes struct {
	mu   sync.Mutex
	runs map[string]*probeRun // tool → the probe running now
	life *life.Life
}

// init makes the map and the life once, under mu.
func (p *probes) init() {
	if p.runs == nil {
		p.runs, p.life = map[string]*probeRun{}, life.New(life.Config{})
	}
}

// probeRun is one probe and the one after it.
type probeRun struct {
	done chan struct{} // closed when err is set
	err  error
	next *probeRun // shared by whoever comes while this one runs
}

// do runs fn for key, or shares a run that starts after the call;
// errStopped once stop has begun.
func (p *probes) do(ctx context.Context, key string, fn func(context.Context) error) error {
	p.mu.Lock()
	p.init()
	var r *probeRun
	switch cur := p.runs[key]; {
	case cur == nil || cur.next == nil:
		r = &probeRun{done: make(chan struct{})}
		if !p.life.Go(func(stop context.Context) { p.run(stop, ctx, key, r, cur, fn) }) {
			p.mu.Unlock()
			return errStopped
		}
		if cur == nil {
			p.runs[key] = r
		} else {
			cur.next = r
		}
	default:
		r = cur.next
	}
	p.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run waits for the probe before it (after), runs fn until stop ends, and
// hands the key on.
func (p *probes) run(stop, ctx context.Context, key string, r, after *probeRun, fn func(context.Context) error) {
	if after != nil {
		<-after.done
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeBound)
	unhook := context.AfterFunc(stop, cancel)
	r.err = fn(ctx)
	unhook()
	cancel()
	p.mu.Lock()
	if r.next != nil {
		p.runs[key] = r.next // its goroutine waits on r.done
	} else {
		delete(p.runs, key)
	}
	close(r.done)
	p.mu.Unlock()
}

// stop refuses new probes, waits for those under way until ctx ends, then
// cancels them and waits at most life.DefaultCleanup more (life.Drain).
// Safe twice.
func (p *probes) stop(ctx context.Context) error {
	p.mu.Lock()
	p.init()
	p.mu.Unlock()
	return p.life.Drain(ctx)
}
