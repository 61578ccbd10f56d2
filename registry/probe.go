package registry

import (
	"context"
	"sync"
	"time"
)

// probeBound bounds one probe of the workers bucket, past its callers.
const probeBound = 5 * time.Second

// probes coalesces the probes of one tool's workers: one read per burst, yet each
// caller gets a probe begun after it came (singleflight would share an older one).
type probes struct {
	mu   sync.Mutex
	runs map[string]*probeRun // tool → the probe running now
}

// probeRun is one probe and the one after it.
type probeRun struct {
	done chan struct{} // closed when err is set
	err  error
	next *probeRun // shared by whoever comes while this one runs
}

// do runs fn for key, or shares a run that starts after the call.
func (p *probes) do(ctx context.Context, key string, fn func(context.Context) error) error {
	p.mu.Lock()
	if p.runs == nil {
		p.runs = map[string]*probeRun{}
	}
	var r, after *probeRun
	switch cur := p.runs[key]; {
	case cur == nil:
		r = &probeRun{done: make(chan struct{})}
		p.runs[key] = r
		go p.run(ctx, key, r, nil, fn)
	case cur.next == nil:
		r, after = &probeRun{done: make(chan struct{})}, cur
		cur.next = r
		go p.run(ctx, key, r, after, fn)
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

// run waits for the probe before it, runs fn, and hands the key on.
func (p *probes) run(ctx context.Context, key string, r, after *probeRun, fn func(context.Context) error) {
	if after != nil {
		<-after.done
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeBound)
	r.err = fn(ctx)
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
