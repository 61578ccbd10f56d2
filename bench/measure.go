package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// callFunc makes one call as caller i.
type callFunc func(ctx context.Context, i int) error

// latencies is a sorted set of call latencies.
type latencies []time.Duration

// quantile returns the q-quantile (nearest rank).
func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(q*float64(len(l))+0.5) - 1
	return l[min(max(i, 0), len(l)-1)]
}

// minLatencySamples keeps percentiles meaningful when a call is slow.
const minLatencySamples = 20

// measureLatency calls fn from one caller, one call after the other, for
// dur (and at least minLatencySamples times).
func measureLatency(ctx context.Context, dur time.Duration, fn callFunc) (latencies, error) {
	var lat latencies
	var err error
	labelled(ctx, partClient, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, dur+callBound)
		defer cancel()
		lat = make(latencies, 0, 4096)
		end := time.Now().Add(dur)
		for time.Now().Before(end) || len(lat) < minLatencySamples {
			t0 := time.Now()
			if err = fn(ctx, 0); err != nil {
				return
			}
			lat = append(lat, time.Since(t0))
		}
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(lat)
	return lat, nil
}

// callBound bounds a measurement's calls beyond its duration, so that a
// stuck path fails the run instead of hanging it.
const callBound = 60 * time.Second

// load is the outcome of running callers concurrently for a while.
type load struct {
	callers int
	window  time.Duration // the measuring window
	counted int64         // calls finished inside the window
	total   int64         // every call, including those finishing after it
	wall    time.Duration // from start until the last call ended
	cpu     time.Duration // process CPU in the same span
	mallocs uint64        // heap allocations in the same span
}

// throughput is calls per second.
//
// It is the calls finished inside the window per second of the window, or,
// when calls last longer than a (short) window allows, every call per
// second of wall time, whichever is larger: a queue that drains only after
// the window closes still shows its rate.
func (l load) throughput() float64 {
	rate := float64(l.counted) / l.window.Seconds()
	if l.wall > 0 {
		rate = max(rate, float64(l.total)/l.wall.Seconds())
	}
	return rate
}

// cpuPerCall is process CPU per call in microseconds.
func (l load) cpuPerCall() float64 {
	if l.total == 0 {
		return 0
	}
	return float64(l.cpu.Microseconds()) / float64(l.total)
}

// cores is the process's CPU use in cores (GOMAXPROCS when it had the
// machine to itself and the path is CPU-bound).
func (l load) cores() float64 {
	if l.wall <= 0 {
		return 0
	}
	return l.cpu.Seconds() / l.wall.Seconds()
}

// allocsPerCall is heap allocations per call.
func (l load) allocsPerCall() float64 {
	if l.total == 0 {
		return 0
	}
	return float64(l.mallocs) / float64(l.total)
}

// runLoad runs callers goroutines that each call fn back to back for dur,
// and measures throughput, process CPU and allocations. Calls still running
// when the window closes finish and count for CPU and allocations only.
func runLoad(ctx context.Context, dur time.Duration, callers int, fn callFunc) (load, error) {
	l := load{callers: callers, window: dur}
	var stop atomic.Bool
	var counted, total atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(ctx, dur+callBound)
	defer cancel()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs0, cpu0, t0 := ms.Mallocs, processCPU(), time.Now()
	timer := time.AfterFunc(dur, func() { stop.Store(true) })
	defer timer.Stop()
	labelled(ctx, partClient, func(ctx context.Context) {
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if err := fn(ctx, i); err != nil {
						once.Do(func() { first = err })
						stop.Store(true)
						return
					}
					total.Add(1)
					if !stop.Load() {
						counted.Add(1)
					}
				}
			}()
		}
	})
	wg.Wait()
	l.cpu, l.wall = processCPU()-cpu0, time.Since(t0)
	runtime.ReadMemStats(&ms)
	l.mallocs = ms.Mallocs - mallocs0
	l.counted, l.total = counted.Load(), total.Load()
	if first != nil {
		return l, fmt.Errorf("bench: %d callers: %w", callers, first)
	}
	return l, nil
}
