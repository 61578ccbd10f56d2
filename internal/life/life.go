// Package life is the one lifecycle of toolbus's long-running components:
// Context is the parent of all work (cancelled with ErrDeadline, then
// ErrStopped), Go/Enter/Leave track work, Landing gives writes that must
// land, Loop runs background loops, Defer registers unwind steps, and
// Drain(ctx) stops, waits, cancels and unwinds within Config.Cleanup
// (Closed after). Commands drain on the first signal (internal/cli.Main).
package life

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// ErrDeadline is the cause of the contexts cut off by a drain's deadline.
var ErrDeadline = errors.New("cut off by the drain deadline")

// ErrStopped is the cause of Context once the drain has ended.
var ErrStopped = errors.New("stopped")

// Defaults of Config.
const (
	DefaultCleanup    = 2 * time.Second
	DefaultLandBudget = 2 * time.Minute
)

// Config configures a Life; every zero value has a working default.
type Config struct {
	// Cleanup bounds the wait, past the drain's deadline, for the work
	// whose context was just cancelled and for the landing writes still
	// in flight; zero means DefaultCleanup.
	Cleanup time.Duration
	// LandBudget bounds one landing write when no drain cuts it first;
	// zero means DefaultLandBudget.
	LandBudget time.Duration
	// OnDeadline, when set, is called once when the drain's deadline passes
	// with work in flight, before that work is cancelled.
	OnDeadline func()
	// Logger receives the drain's warnings; nil discards.
	Logger *slog.Logger
}

// Life tracks the work of one component. The zero value is not usable;
// call New.
type Life struct {
	cfg Config

	base      context.Context
	cut       context.CancelCauseFunc
	land      context.Context // parent of landing writes: cut only at the end of the cleanup window
	landCut   context.CancelCauseFunc
	loops     context.Context // background loops: stopped once the work is done
	stopLoops context.CancelFunc

	mu       sync.Mutex
	draining bool
	landOpen bool // landing writes are taken (until the end of the cleanup window)
	// The landing writes in flight, and a channel closed when they fall to
	// none: a write may begin while the drain waits, which a WaitGroup forbids.
	landN    int
	landIdle chan struct{}
	work     sync.WaitGroup
	bg       sync.WaitGroup
	unwind   []func(ctx context.Context) error

	once   sync.Once
	closed chan struct{}
	err    error
}

// New returns a Life that takes work.
func New(cfg Config) *Life {
	cfg.Cleanup = cmp.Or(max(cfg.Cleanup, 0), DefaultCleanup)
	cfg.LandBudget = cmp.Or(max(cfg.LandBudget, 0), DefaultLandBudget)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	l := &Life{cfg: cfg, closed: make(chan struct{}), landOpen: true}
	l.base, l.cut = context.WithCancelCause(context.Background())
	l.land, l.landCut = context.WithCancelCause(context.Background())
	l.loops, l.stopLoops = context.WithCancel(l.base)
	return l
}

// Context is the parent of the component's work.
func (l *Life) Context() context.Context { return l.base }

// Background is the context of the component's watches and background
// loops: it ends once the drain has waited for the work (or cut it off).
func (l *Life) Background() context.Context { return l.loops }

// Enter counts one piece of work that the caller runs itself; false once a
// drain has begun (the work must not start). Each true is matched by Leave.
func (l *Life) Enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.draining {
		return false
	}
	l.work.Add(1)
	return true
}

// Leave ends a piece of work counted by Enter.
func (l *Life) Leave() { l.work.Done() }

// Go runs fn on its own goroutine as tracked work, with Context; false
// (fn not run) once a drain has begun.
func (l *Life) Go(fn func(ctx context.Context)) bool {
	if !l.Enter() {
		return false
	}
	go func() {
		defer l.Leave()
		fn(l.base)
	}()
	return true
}

// Loop runs fn on its own goroutine until the drain has waited for the
// work (fn returns when its context ends); false, fn not run, past that.
func (l *Life) Loop(fn func(ctx context.Context)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loops.Err() != nil {
		return false
	}
	l.bg.Go(func() { fn(l.loops) })
	return true
}

// Landing returns the context of a write that must land, bounded by
// Config.LandBudget: a drain waits for it (until its cancel, which must be
// called) and cuts it off only at the end of its cleanup window.
func (l *Life) Landing() (context.Context, context.CancelFunc) {
	l.mu.Lock()
	if !l.landOpen {
		l.mu.Unlock()
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(ErrStopped)
		return ctx, func() {}
	}
	if l.landN++; l.landN == 1 {
		l.landIdle = make(chan struct{})
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(l.land, l.cfg.LandBudget)
	return ctx, sync.OnceFunc(func() {
		cancel()
		l.mu.Lock()
		if l.landN--; l.landN == 0 {
			close(l.landIdle)
			l.landIdle = nil
		}
		l.mu.Unlock()
	})
}

// landed is closed once no landing write is in flight.
func (l *Life) landed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.landIdle == nil {
		return closedChan
	}
	return l.landIdle
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Defer registers fn as a step of the unwind, run once at the end of the
// drain, the last registered first, with a context that ends Config.Cleanup
// after the unwind starts; an error it returns is logged.
func (l *Life) Defer(fn func(ctx context.Context) error) {
	l.mu.Lock()
	l.unwind = append(l.unwind, fn)
	l.mu.Unlock()
}

// Draining reports whether a drain has begun.
func (l *Life) Draining() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.draining
}

// Closed is closed once Drain has returned.
func (l *Life) Closed() <-chan struct{} { return l.closed }

// Drain stops taking work, waits for the work and the landing writes until
// ctx ends, cancels what is left (ErrDeadline) and waits at most
// Config.Cleanup more, then stops the loops and runs the unwind; an error
// wraps ctx's when work was cut off. Later calls return the first's result.
func (l *Life) Drain(ctx context.Context) error {
	l.once.Do(func() {
		l.err = l.drain(ctx)
		close(l.closed)
	})
	<-l.closed
	return l.err
}

func (l *Life) drain(ctx context.Context) error {
	l.mu.Lock()
	l.draining = true
	l.mu.Unlock()
	// One window for all the waits below: a closed channel (a timer ticks once).
	var (
		cleanup chan struct{}
		timer   *time.Timer
	)
	window := func() <-chan struct{} {
		if cleanup == nil {
			end := make(chan struct{})
			cleanup, timer = end, time.AfterFunc(l.cfg.Cleanup, func() { close(end) })
		}
		return cleanup
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var err error
	if work := waited(&l.work); !wait(ctx, work, nil) {
		if l.cfg.OnDeadline != nil {
			l.cfg.OnDeadline()
		}
		l.cut(ErrDeadline)
		err = fmt.Errorf("work cut off: %w", ctx.Err())
		if !wait(context.Background(), work, window()) {
			l.cfg.Logger.Warn("life: work still running past the drain's cleanup window")
		}
	}
	if !wait(ctx, l.landed(), nil) && !wait(context.Background(), l.landed(), window()) {
		l.cfg.Logger.Warn("life: writes that must land cut off by the drain deadline")
	}
	l.mu.Lock()
	l.landOpen = false
	l.stopLoops()
	l.mu.Unlock()
	l.landCut(ErrDeadline)
	l.cut(ErrStopped)
	if bg := waited(&l.bg); !wait(ctx, bg, nil) && !wait(context.Background(), bg, window()) {
		l.cfg.Logger.Warn("life: background loops still running past the drain's cleanup window")
	}
	l.mu.Lock()
	steps := slices.Clone(l.unwind)
	l.unwind = nil
	l.mu.Unlock()
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Cleanup)
	defer cancel()
	for _, fn := range slices.Backward(steps) {
		if uerr := fn(uctx); uerr != nil {
			l.cfg.Logger.Warn("life: unwind step", "err", uerr)
		}
	}
	return err
}

// WaitFor waits for wg until ctx ends; false when ctx ended first.
func WaitFor(ctx context.Context, wg *sync.WaitGroup) bool { return wait(ctx, waited(wg), nil) }

// waited is closed once wg's Wait returns.
func waited(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// wait waits for done until ctx ends or, when limit is not nil, until it
// is closed; false when done was not closed.
func wait(ctx context.Context, done <-chan struct{}, limit <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
	case <-limit:
	}
	select { // both ready: the work did finish
	case <-done:
		return true
	default:
		return false
	}
}

// Every calls fn with the time of each tick, every interval, until ctx
// ends; a tick that comes once ctx has ended does not call it.
func Every(ctx context.Context, interval time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if ctx.Err() != nil {
				return
			}
			fn(now)
		}
	}
}
